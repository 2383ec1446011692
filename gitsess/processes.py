"""Whether a process still runs, by pid: for what a process that is gone left behind."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether `pid` names a process (another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
