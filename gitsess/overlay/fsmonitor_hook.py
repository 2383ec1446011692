"""git's core.fsmonitor hook (protocol version 2), answered by the session's daemon.

Run by git for every status inside a session, so it starts lean: `python -S`, standard library
only, no gitsess import. Any failure answers "everything may have changed" (git then scans).
"""

import json
import os
import socket
import sys


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] != "2":
        return 1  # git falls back to a full scan for other protocol versions
    token, paths = "", None
    session_id = os.environ.get("GITSESS_SESSION_ID", "")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(b"\0gitsess-" + session_id.encode())
            sock.sendall(json.dumps({"op": "fsmonitor", "token": sys.argv[2]}).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                part = sock.recv(1 << 20)
                if not part:
                    break
                buf += part
        reply = json.loads(buf)
        token, paths = reply["token"], reply["paths"]
    except (OSError, ValueError, KeyError):
        pass
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
