"""git's core.fsmonitor hook (protocol version 2), answered by the session's daemon.

Run by git for every status inside a session, so it starts lean: `python -S` (no site
packages), and nothing of gitsess nor of the standard library's Python modules beyond what
the interpreter loads anyway: the request goes out over `_socket` with `_json`'s C encoder and
scanner, as `control.py` would send it. Loading `json` and `socket` (`re`, `enum` and more
behind them) took 41 ms of CPU per run where the C modules took 18 (the interpreter alone 13),
at a load of 12 on this machine. Any failure answers "everything may have changed" (git then
scans).

This is the fallback: where the install had a C compiler, git runs `fsmonitor_hook.c`, built
as `COMPILED` next to this file, which speaks the same protocol in about a millisecond.
"""

import _json
import _socket
import _struct
import os
import sys

TIMEOUT = 5.0
# What `control.py` names: the file in the session dir holding the daemon's abstract socket
# name, and the shape of SO_PEERCRED.
NAME_FILE = "control"
_CREDS = "3i"
# The compiled hook's file name (setup.py builds it).
COMPILED = "fsmonitor-hook"
# (git warns of an empty token: this one no journal knows, so it means "everything" too)
UNKNOWN = "gitsess:unknown"


class _Context:
    """What `_json.make_scanner` reads of a `json.JSONDecoder`."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float


def ask(session_dir: str, token: str) -> tuple[str, list[str] | None] | None:
    """The daemon's answer (its token, the paths changed since `token` or None for
    "anything may have"), None when no daemon of this user (or root) answers."""
    try:
        with open(os.path.join(session_dir, NAME_FILE), "rb") as f:
            name = b"\0" + f.read()
    except OSError:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(TIMEOUT)
        sock.connect(name)
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _struct.calcsize(_CREDS))
        if _struct.unpack(_CREDS, creds)[1] not in (os.geteuid(), 0):
            return None  # someone else holds the name: not our daemon
        quoted = _json.encode_basestring_ascii(token)
        sock.sendall(b'{"op": "fsmonitor", "token": ' + quoted.encode() + b"}\n")
        buf = b""
        while not buf.endswith(b"\n"):
            part = sock.recv(65536)
            if not part:
                return None
            buf += part
    except OSError:
        return None
    finally:
        sock.close()
    # (typeshed wants a JSONDecoder, which would load `json`: the scanner reads these fields)
    scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
    reply = scan(buf.decode("utf-8", "surrogateescape"), 0)[0]
    if not isinstance(reply, dict) or not reply.get("ok"):
        return None
    return str(reply["token"]), reply["paths"]


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] != "2":
        return 1  # git falls back to a full scan for other protocol versions
    session_dir = os.path.join(
        os.environ.get("GITSESS_DIR", ""), "sessions", os.environ.get("GITSESS_SESSION_ID", "")
    )
    try:
        answer = ask(session_dir, sys.argv[2])
    except (ValueError, KeyError, TypeError, StopIteration):
        answer = None
    token, paths = answer if answer is not None else (UNKNOWN, None)
    out = sys.stdout.buffer
    out.write(token.encode() + b"\0")
    if paths is None:
        out.write(b"/\0")
    else:
        for path in paths:
            out.write(os.fsencode(path) + b"\0")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
