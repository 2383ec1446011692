"""git's core.fsmonitor hook (protocol version 2), answered by the session's daemon.

Run by git for every status inside a session, so it starts lean: `python -S` (no site
packages, so the directory that holds `gitsess` is put on the path by hand), and of gitsess
only `overlay/protocol.py`, which needs the standard library alone. Any failure answers
"everything may have changed" (git then scans).
"""

import os
import sys

if __name__ == "__main__":  # run by git; imported, it is only named (`live.FSMONITOR_CONFIG`)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from gitsess.overlay import protocol

TIMEOUT = 5.0


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] != "2":
        return 1  # git falls back to a full scan for other protocol versions
    # (git warns of an empty token: this one no journal knows, so it means "everything" too)
    token, paths = "gitsess:unknown", None
    session_dir = os.path.join(
        os.environ.get("GITSESS_DIR", ""), "sessions", os.environ.get("GITSESS_SESSION_ID", "")
    )
    try:
        changes = protocol.fsmonitor(session_dir, sys.argv[2], TIMEOUT)
    except (OSError, ValueError, KeyError, protocol.Refused):
        changes = None
    if changes is not None:
        token, paths = changes.token, changes.paths
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
