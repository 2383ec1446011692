"""A daemon's process started before the command that will mount knows its session.

Most of a daemon's start-up is importing the overlay (pyfuse3, trio). A command that will most
likely mount (`mount`, `run`, `new --mount`) starts that process first thing (`cli.main`, before
the command line's own modules load), so the import runs on the other core while the command
finds its session. `mount.ensure_mounted` hands the process its arguments through a pipe, and
it runs the daemon; unused, it exits when the pipe closes.

Nothing at the top that `cli.main` does not load anyway: whatever this module imports, the
command waits for before the daemon's process even starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

DAEMON_MODULE = "gitsess.overlay.daemon"
# How a prestarted process shows in `ps`: `python -m gitsess.runtime.prestart --daemon-args-fd N`.
ARGS_FD_OPTION = "--daemon-args-fd"


class _Started(NamedTuple):
    args: int  # write end of the pipe the process reads its arguments from
    ready: int  # read end of its readiness pipe
    ready_fd: int  # the process's end of that pipe (it keeps its number)


_started: _Started | None = None


@contextlib.contextmanager
def prestarted() -> Iterator[None]:
    """A daemon process started now, for the block's `ensure_mounted` to give a session to;
    when none did, it is let go at the end of the block."""
    start()
    try:
        yield
    finally:
        discard()


def start() -> None:
    global _started
    discard()
    # subprocess, not os.posix_spawn, which would hand the process every descriptor this
    # command inherited: inside `gitsess run`, the connection that makes the command a
    # participant of its session, which a daemon started from there then held for good.
    import subprocess

    args_read, args_write = os.pipe()
    ready_read, ready_write = os.pipe()
    try:
        subprocess.Popen(
            # -P: the current directory (a repository, whose types.py or signal.py would be
            # imported, and run, before our own) is not put on sys.path
            [sys.executable, "-P", "-m", __name__, ARGS_FD_OPTION, str(args_read)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(args_read, ready_write),
            start_new_session=True,
        )
    except OSError:
        # Only a prestart: `ensure_mounted` starts the daemon as usual.
        os.close(args_write)
        os.close(ready_read)
        return
    finally:
        os.close(args_read)
        os.close(ready_write)
    _started = _Started(args_write, ready_read, ready_write)


def discard() -> None:
    """Let an unused prestarted process go: it exits at the end of its arguments pipe."""
    global _started
    if _started is not None:
        os.close(_started.args)
        os.close(_started.ready)
        _started = None


def hand_over(args: list[str], log: Path) -> int | None:
    """Give the prestarted process its arguments; the read end of its readiness pipe, or None
    when there is no such process (or it died: started with no log, it could not say why)."""
    import json

    global _started
    taken, _started = _started, None
    if taken is None:
        return None
    told = json.dumps({"argv": [*args, "--ready-fd", str(taken.ready_fd)], "log": str(log)})
    try:
        with open(taken.args, "wb") as pipe:
            pipe.write(told.encode())
    except BrokenPipeError:
        os.close(taken.ready)
        return None
    return taken.ready


def _serve_when_told(args_fd: int) -> int:
    """The prestarted process: import the daemon, wait for its arguments, then run it."""
    import importlib
    import json

    with contextlib.suppress(Exception):
        # Only warming up: a daemon that cannot be imported fails again below, into its log.
        importlib.import_module(DAEMON_MODULE)
    with open(args_fd, "rb") as pipe:
        told = pipe.read()
    if not told:
        return 0
    request = json.loads(told)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    os.dup2(log, sys.stdout.fileno())
    os.dup2(log, sys.stderr.fileno())
    os.close(log)
    from gitsess.overlay import daemon

    return daemon.main(request["argv"])


if __name__ == "__main__":
    if sys.argv[1:2] != [ARGS_FD_OPTION] or len(sys.argv) != 3:
        sys.exit(f"usage: python -m {__spec__.name} {ARGS_FD_OPTION} FD (started by gitsess)")
    sys.exit(_serve_when_told(int(sys.argv[2])))
