"""Daemons of this user that outlived their view: their session dir deleted, or their mount gone
from the mount table. A daemon notices either within seconds and exits (overlay/presence.py);
what `gitsess ps` and `gc` find here are those that did not (a daemon of an older gitsess, one
stuck on a full disk it can no longer save to).

A daemon is found by its command line (the daemon's module when started directly, the
spare's when forked from it), its session by the control socket it listens on
(`\\0gitsess-<id>-<random>`, listed in /proc/net/unix with its inode, which its descriptors
name), its delta by the descriptor open on `delta.db`. Its mount point is what it answers when
asked; one that answers nothing is left alone unless its delta.db is deleted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

from gitsess import processes
from gitsess.overlay import control, layout, mounttable, protocol
from gitsess.runtime import prestart, spare
from gitsess.runtime.mount import FSTYPE

# The modules a daemon's process runs (`python -m MODULE`): its own, or the spare's it was
# forked from.
MODULES = (prestart.DAEMON_MODULE.encode(), spare.MODULE.encode())
DELETED = " (deleted)"
# How long a stray may take to save and exit after SIGTERM before it is killed.
TERM_WAIT_S = 5.0
STATUS_TIMEOUT = 2.0


@dataclass(frozen=True)
class Stray:
    pid: int
    session_id: str
    delta: str  # the delta.db it holds open (gone from its directory when deleted)
    reason: str


def find() -> list[Stray]:
    """The daemons of this user that serve no view any more."""
    sockets = _control_sockets()
    found = []
    for pid in _daemon_pids():
        stray = _judge(pid, sockets)
        if stray is not None:
            found.append(stray)
    return found


def end(stray: Stray) -> None:
    """SIGTERM (it saves what it can and exits), then SIGKILL if it has not exited in time.
    Only the same process: a pid that names another one since is left alone."""
    try:
        since = processes.stat_fields(stray.pid)[19]
        os.kill(stray.pid, signal.SIGTERM)
    except (FileNotFoundError, ProcessLookupError):
        return
    deadline = time.monotonic() + TERM_WAIT_S
    while time.monotonic() < deadline:
        if not _same(stray.pid, since):
            return
        time.sleep(0.05)
    if _same(stray.pid, since):
        with contextlib.suppress(ProcessLookupError):
            os.kill(stray.pid, signal.SIGKILL)


def _same(pid: int, since: str) -> bool:
    """Whether `pid` is still the running process that started at `since`."""
    try:
        fields = processes.stat_fields(pid)
    except FileNotFoundError:
        return False
    return fields[0] != "Z" and fields[19] == since


def _daemon_pids() -> Iterator[int]:
    uid = os.geteuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(argv[i] == b"-m" and argv[i + 1] in MODULES for i in range(len(argv) - 1)):
            yield int(entry.name)


def _control_sockets() -> dict[str, str]:
    """Listening control sockets: inode -> session id."""
    prefix = b"@" + control.PREFIX[1:]
    found = {}
    with open("/proc/net/unix", "rb") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 8 and fields[7].startswith(prefix):
                # `<id>-<random>` (see control.new_address): the id is a uuid.
                named = fields[7][len(prefix) :][:36]
                found[fields[6].decode()] = named.decode(errors="replace")
    return found


def _judge(pid: int, sockets: dict[str, str]) -> Stray | None:
    session_id = delta = None
    try:
        for fd in os.scandir(f"/proc/{pid}/fd"):
            target = os.readlink(fd.path)
            if target.startswith("socket:[") and target[8:-1] in sockets:
                session_id = sockets[target[8:-1]]
            elif target.endswith(("/" + layout.DELTA, "/" + layout.DELTA + DELETED)):
                delta = target
    except OSError:
        return None
    if session_id is None or delta is None:
        return None  # a prestarted process not handed a session yet, or one still starting
    if delta.endswith(DELETED):
        return Stray(pid, session_id, delta.removesuffix(DELETED), "its session dir was deleted")
    try:
        reply = protocol.status(os.path.dirname(delta), timeout=STATUS_TIMEOUT)
    except (OSError, ConnectionError, protocol.Refused):
        return None
    if reply is None or reply.daemon_pid != pid:
        return None
    if not _mounted_for(pid, reply.mountpoint):
        return Stray(pid, session_id, delta, f"its view at {reply.mountpoint} was unmounted")
    return None


def _mounted_for(pid: int, mountpoint: str) -> bool:
    """Whether a view is mounted at `mountpoint` in the daemon's own mount namespace."""
    try:
        table = mounttable.mounts(f"/proc/{pid}/mountinfo")
    except OSError:
        return True
    return any(m.point == mountpoint and m.fstype == FSTYPE for m in table)
