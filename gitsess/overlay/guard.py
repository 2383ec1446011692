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

So the daemon forks a guard first thing, and names the view to it once mounted. The guard is a
small program (`guard.c`, built by the install as `gitsess-guard` next to this file), exec'd
at once: a Python guard, an idle fork of the daemon's interpreter, kept 1.7 MiB of private
pages for as long as its view was mounted. It closes every descriptor it inherited (it must
not keep /dev/fuse open either) but a pipe from the daemon, takes the parent's death signal
(PR_SET_PDEATHSIG, sent when the thread that forked it, the daemon's main thread, exits) and
waits for it. A daemon that ends on its own says so through the pipe before it unmounts
(`stand_down`), and the guard does nothing. A killed one that finishes exiting within 2 s
closed /dev/fuse, and the kernel ended the connection itself: nothing to do either, and nothing
may be done by its number, which the next view may have by then. One that does not is stuck,
and holds its connection, so the number is still its own: the guard aborts it (through the
fusectl file system, which a root guard mounts for it where nothing did, as a view
detached by a lazy unmount has no mount left to force off; else as root by a forced unmount,
which aborts a FUSE connection first), the kernel ends every request in flight, the waiting
thread returns, and the daemon finishes exiting. What is left of the view answers ENOTCONN,
and the next command unmounts it (`mount.clean_stale`), as after any daemon killed.
"""

from __future__ import annotations

import contextlib
import os

from gitsess import processes
from gitsess.overlay import mounttable

# The compiled guard's file name (setup.py builds it from guard.c).
COMPILED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gitsess-guard")


def start() -> int:
    """Start the guard of the view this process is about to mount (`arm` names the view once
    mounted); what to hand `arm` and `stand_down`. Forked first thing, before the daemon
    builds its tree, so the moment of the fork copies little, and exec'd at once."""
    if not os.access(COMPILED, os.X_OK):
        raise RuntimeError(f"the install lacks its compiled guard {COMPILED}: install again")
    parent = os.getpid()
    since = int(processes.stat_fields(parent)[19])
    told, tell = os.pipe2(os.O_CLOEXEC)
    if os.fork() == 0:
        try:
            os.set_inheritable(told, True)
            os.execv(COMPILED, [COMPILED, str(parent), str(since), str(told)])
        finally:
            os._exit(127)
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
