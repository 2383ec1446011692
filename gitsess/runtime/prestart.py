"""The head start of a command that will most likely mount (`mount`, `run`, `new --mount`):
first thing (`cli.main`, before the command line's own modules load), it makes sure the user's
spare runs (`spare`: the process every daemon is forked from, which has imported the overlay),
starting it when it does not, so that its imports run on the other core while the command
finds its session. `mount.ensure_mounted` then has the spare fork the session's daemon
(`hand_over`); without a spare, it starts the daemon as a process of its own.

Nothing at the top that `cli.main` does not load anyway: whatever this module imports, the
command waits for before the spare even starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

DAEMON_MODULE = "gitsess.overlay.daemon"


class _Started:
    """Whether this command asked for the spare, and the spare it started, if it did."""

    def __init__(self, process: subprocess.Popen[bytes] | None) -> None:
        self.process = process


_started: _Started | None = None


@contextlib.contextmanager
def prestarted() -> Iterator[None]:
    """The spare made sure of now, for the block's `ensure_mounted` to have fork its daemon."""
    start()
    try:
        yield
    finally:
        discard()


def start() -> None:
    global _started
    from gitsess.runtime import spare

    try:
        _started = _Started(spare.start())
    except OSError:
        # Only a head start: `ensure_mounted` starts the daemon as usual.
        _started = None


def discard() -> None:
    """The command mounts nothing (more): a spare it started goes by itself once idle."""
    global _started
    _started = None


def hand_over(args: list[str], log: Path) -> int | None:
    """Have the spare fork the daemon with `args`; the read end of its readiness pipe, or None
    when this command did not ask for the spare, or no spare took the request."""
    from gitsess.runtime import spare

    global _started
    taken, _started = _started, None
    if taken is None:
        return None
    ready_read, ready_write = os.pipe()
    try:
        forked = spare.fork_daemon(args, str(log), ready_write, taken.process)
    finally:
        os.close(ready_write)
    if not forked:
        os.close(ready_read)
        return None
    return ready_read
