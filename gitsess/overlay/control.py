"""The daemon's control channel: JSON lines over an abstract unix socket.

An abstract socket has no file to go stale and no path-length limit. A participant is a
connection held open: when every process holding it has exited (even by kill -9) the kernel
closes it, and the daemon sees the participant leave.

An abstract socket has no permissions either: any local user can connect to one, or bind a
name first. So the name has a random part each daemon draws (`new_address`) and publishes in
the session dir (`NAME_FILE`, in the 0700 state dir), where only its user learns it: no one
else can take the name first (issue 37). Both ends still check who is at the other
(`SO_PEERCRED`): the daemon serves only its own user and root, and a client talks only to a
daemon of its own user or of root. That a daemon serves the session at all is a lock it holds
on `LOCK_FILE` for its whole life (`hold`), which clients test without taking (`serving`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

from gitsess import durable

# (`typing` itself would cost the fsmonitor hook some 10 ms; see protocol.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

TIMEOUT = 30.0


NAME_FILE = "control"
LOCK_FILE = "daemon.lock"


PREFIX = b"\0gitsess-"


def new_address(session_id: str) -> bytes:
    return PREFIX + session_id.encode() + b"-" + os.urandom(16).hex().encode()


def address(session_dir: str) -> bytes | None:
    """The name the session's daemon published, or None when none ever did."""
    try:
        with open(os.path.join(session_dir, NAME_FILE), "rb") as f:
            name = f.read()
    except FileNotFoundError:
        return None
    return b"\0" + name


def publish(session_dir: str, name: bytes) -> None:
    """Make `name` the one clients connect to (written aside, then renamed into place)."""
    with durable.write_aside(os.path.join(session_dir, NAME_FILE), 0o600) as f:
        f.write(name[1:])


def hold(session_dir: str) -> int | None:
    """Take the session's daemon lock for the life of this process: the descriptor, or None
    when another daemon holds it. (A POSIX lock: not inherited by forked children, released
    when the process ends however it ends.)"""
    fd = os.open(os.path.join(session_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EACCES, errno.EAGAIN):
            return None
        raise
    return fd


# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (and padding).
_FLOCK = "hhqqi4x"


def serving(session_dir: str) -> bool:
    """Whether a daemon serves the session (until it exited, after its last commit), asked
    without taking the lock: taking it, even for a moment, would turn a starting daemon away."""
    return holder(session_dir) is not None


def holder(session_dir: str) -> int | None:
    """The pid of the daemon that holds the session's lock, as this process's PID namespace
    numbers it (0 where it has no number here); None when no daemon holds it."""
    try:
        fd = os.open(os.path.join(session_dir, LOCK_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        probe = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        lock_type, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, probe))
    finally:
        os.close(fd)
    return None if lock_type == fcntl.F_UNLCK else int(pid)


def connect(session_dir: str, timeout: float = TIMEOUT) -> socket.socket | None:
    """A connection to the session's daemon, or None when no daemon serves it."""
    name = address(session_dir)
    if name is None:
        return None
    import socket  # (when there is a daemon to talk to: `ls` of idle sessions needs none)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(name)
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return None
    if not trusted(peer_uid(sock)):
        # Someone else holds the name: not our daemon, whatever it would answer.
        sock.close()
        return None
    return sock


def connect_trusted(name: bytes, timeout: float | None = None) -> socket.socket | None:
    """A connection to the abstract socket `name` (a watch process, the spare), if one of this
    user (or root) serves it: another user could have taken the name first."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(name)
    except OSError:
        sock.close()
        return None
    if not trusted(peer_uid(sock)):
        sock.close()
        return None
    return sock


def peer_uid(sock: socket.socket) -> int:
    """The user of the process at the other end of a unix socket, as the kernel saw it."""
    import socket

    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def trusted(uid: int) -> bool:
    """Whether a peer of this user may be served, or believed: this process's user, or root."""
    return uid in (os.geteuid(), 0)


def send(sock: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    import json  # (with the connection: see `connect`)

    sock.sendall(json.dumps(message).encode() + b"\n")
    reply = _readline(sock)
    if not reply:
        raise ConnectionError("the session daemon closed the connection")
    answer: dict[str, Any] = json.loads(reply)
    return answer


def request(
    session_dir: str, message: dict[str, Any], timeout: float = TIMEOUT
) -> dict[str, Any] | None:
    """One request to the daemon; None when it is not running."""
    sock = connect(session_dir, timeout)
    if sock is None:
        return None
    with sock:
        return send(sock, message)


def _readline(sock: socket.socket) -> bytes:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        part = sock.recv(65536)
        if not part:
            break
        buf += part
    return bytes(buf)
