"""A process that waits for the daemon to die, then ends the FUSE connection of its view.

The daemon's own threads make requests of its view: the listing threads list directories
through it (`overlay/listahead.py`), and a thread `stat`s it to raise the read-ahead. When the
daemon dies (kill -9, a crash) after it read such a request and before it answered, the thread
that asked waits for the answer in a wait that no signal ends (`request_wait_answer`: a request
the server has read is only ever ended by its reply or by the connection's end). The process
cannot finish exiting while one of its threads waits, so it keeps /dev/fuse open, so the kernel
never ends the connection: the daemon stays, a zombie with one thread, holding its control
socket, and everything that touches the view waits with it for good (the next `gitsess run`'s
check of the stale mount too). It happened in the test suite: a `kill -9` of a daemon during
writes in the root of the view, whose lookups list it ahead.

So the daemon forks a guard first thing, and names the view to it once mounted. It closes every
descriptor it inherited (it must not keep /dev/fuse open either) but a pipe from the daemon,
takes the parent's death signal (PR_SET_PDEATHSIG, sent when the thread that forked it, the
daemon's main thread, exits) and waits for it. A daemon that ends on its own says so through the
pipe before it unmounts (`stand_down`), and the guard does nothing. A killed one that finishes
exiting within EXIT_S closed /dev/fuse, and the kernel ended the connection itself: nothing to
do either, and nothing may be done by its number, which the next view may have by then. One that
does not is stuck, and holds its connection, so the number is still its own: the guard aborts it
(through the fusectl file system, or as root by a forced unmount, which aborts a FUSE connection
first), the kernel ends every request in flight, the waiting thread returns, and the daemon
finishes exiting. What is left of the view answers ENOTCONN, and the next command unmounts it
(`mount.clean_stale`), as after any daemon killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from typing import NoReturn

from gitsess import processes
from gitsess.libc import LIBC
from gitsess.overlay import mounttable

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
MNT_FORCE = 1
CONNECTIONS = "/sys/fs/fuse/connections"
# What the parent's death sends: blocked until the guard waits for it, so none is lost.
DEATH = signal.SIGUSR1
# How long a killed daemon may take to finish exiting before the guard takes it for stuck.
EXIT_S = 2.0


def start() -> int:
    """Fork the guard of the view this process is about to mount (`arm` names the view once
    mounted); what to hand `arm` and `stand_down`. Forked first thing, before the daemon
    builds its tree: the guard's pages stay those of the spare it was forked from, shared,
    where a guard forked after the daemon's start held its own copy of each page the daemon
    wrote since (4 MiB of every mounted session)."""
    parent = os.getpid()
    since = _start_time(parent)
    told, tell = os.pipe2(os.O_CLOEXEC)
    if os.fork() == 0:
        _guard(parent, since, told)
    os.close(told)
    return tell


def arm(tell: int, mountpoint: str) -> bool:
    """Name the view mounted at `mountpoint` by this process to its guard; False when the
    mount is not found (then the guard has nothing to abort)."""
    device = mounttable.device_at(mountpoint)
    if device is None:
        return False
    os.write(tell, b"%s\0%s\n" % (device.encode(), os.fsencode(mountpoint)))
    return True


def stand_down(tell: int) -> None:
    """The daemon ends on its own: its guard has nothing to do (the connection's number may
    be another view's by the time the daemon has exited)."""
    with contextlib.suppress(OSError):
        os.write(tell, b".")


def _guard(parent: int, since: int, told: int) -> NoReturn:
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {DEATH})
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            # A group's Ctrl-C or hangup ends the daemon: the guard is needed then most.
            signal.signal(signum, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.closerange(3, told)
        os.closerange(told + 1, os.sysconf("SC_OPEN_MAX"))
        LIBC.prctl(PR_SET_NAME, b"gitsess-guard", 0, 0, 0)
        LIBC.prctl(PR_SET_PDEATHSIG, DEATH, 0, 0, 0)
        if os.getppid() == parent:
            signal.sigwait({DEATH})
        told_us = _told(told)
        armed = told_us.partition(b"\n")[0]
        if b"\0" in armed and not told_us.endswith(b".") and not _exits(parent, since):
            device, _, mountpoint = armed.partition(b"\0")
            abort(device.decode(), os.fsdecode(mountpoint))
        code = 0
    finally:
        os._exit(code)


def _told(told: int) -> bytes:
    """What the daemon wrote to its guard: the view once mounted (`arm`), then "." when it
    stood the guard down."""
    os.set_blocking(told, False)
    got = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(told, 4096):
            got += chunk
    return got


def _exits(pid: int, since: int) -> bool:
    """Whether the dead daemon finishes exiting within EXIT_S: then it closed /dev/fuse, and
    the kernel ended the connection itself. One that does not is held by a thread's wait,
    and holds the connection, whose number is then its own still."""
    deadline = time.monotonic() + EXIT_S
    while not _exited(pid, since):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _exited(pid: int, since: int) -> bool:
    """Gone, or a zombie of one thread (a zombie leader with threads left is the stuck
    case), or its pid another process's."""
    try:
        fields = processes.stat_fields(pid)
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return True
    return (fields[0] == "Z" and threads == 1) or int(fields[19]) != since


def _start_time(pid: int) -> int:
    return int(processes.stat_fields(pid)[19])


def abort(device: str, mountpoint: str) -> bool:
    """End the FUSE connection of device `device` if it is still there; whether it did."""
    control = f"{CONNECTIONS}/{device.partition(':')[2]}"
    if os.path.isdir(control):
        with contextlib.suppress(OSError), open(f"{control}/abort", "w") as f:
            f.write("1")
            return True
    if mounttable.device_at(mountpoint) != device:
        return False
    # Fuse's umount_begin aborts the connection; the unmount itself may then fail (busy).
    done = LIBC.umount2(os.fsencode(mountpoint), MNT_FORCE) == 0
    return done or ctypes.get_errno() == errno.EBUSY
