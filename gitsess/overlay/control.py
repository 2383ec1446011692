"""The daemon's control channel: JSON lines over an abstract unix socket named by session id.

An abstract socket has no file to go stale and no path-length limit; it vanishes with the
daemon, so "can I connect" is also "is the daemon alive". A participant is a connection held
open: when every process holding it has exited (even by kill -9) the kernel closes it, and the
daemon sees the participant leave.

An abstract socket has no permissions either: any local user can connect to one, or bind a
name first. So both ends check who is at the other (`SO_PEERCRED`): the daemon serves only its
own user and root, and a client talks only to a daemon of its own user or of root.
"""

from __future__ import annotations

import json
import os
import socket
import struct

# (`typing` itself would cost the fsmonitor hook some 10 ms; see protocol.py)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TIMEOUT = 30.0


def address(session_id: str) -> bytes:
    return b"\0gitsess-" + session_id.encode()


def connect(session_id: str, timeout: float = TIMEOUT) -> socket.socket | None:
    """A connection to the session's daemon, or None when no daemon serves it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address(session_id))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return None
    if not trusted(peer_uid(sock)):
        # Someone else holds the name: not our daemon, whatever it would answer.
        sock.close()
        return None
    return sock


def peer_uid(sock: socket.socket) -> int:
    """The user of the process at the other end of a unix socket, as the kernel saw it."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def trusted(uid: int) -> bool:
    """Whether a peer of this user may be served, or believed: this process's user, or root."""
    return uid in (os.geteuid(), 0)


# Listening sockets carry this in their flags in /proc/net/unix (the kernel's __SO_ACCEPTCON).
_LISTENING = 0x10000


def serving(session_id: str) -> bool:
    """Whether a daemon holds the session's name, found without connecting: a stopping daemon
    accepts no more, and every probe left in its backlog would fill it (then connecting fails
    with EAGAIN)."""
    name = b"@" + address(session_id)[1:]
    with open("/proc/net/unix", "rb") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 8 and fields[7] == name and int(fields[3], 16) & _LISTENING:
                return True
    return False


def send(sock: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    sock.sendall(json.dumps(message).encode() + b"\n")
    reply = _readline(sock)
    if not reply:
        raise ConnectionError("the session daemon closed the connection")
    answer: dict[str, Any] = json.loads(reply)
    return answer


def request(
    session_id: str, message: dict[str, Any], timeout: float = TIMEOUT
) -> dict[str, Any] | None:
    """One request to the daemon; None when it is not running."""
    sock = connect(session_id, timeout)
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
