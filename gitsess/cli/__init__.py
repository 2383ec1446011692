"""The command line: parse, call a service, render. Decisions belong to the services.

`main` is the console script; the click group and its commands are in `group` and the
`*_cmds` modules, loaded once `main` gave a command that will mount its daemon's prestart.
`gitsess --version` is answered before click loads. The script ends with `os._exit` once
atexit's handlers ran and the streams are flushed, when no other thread runs and no profiler or
tracer watches: the interpreter's teardown cost more than many commands. Called in process with
arguments, as the tests do, `main` raises SystemExit as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading

# Not `typing.TYPE_CHECKING`: `gitsess --version` is done before anything imports typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def _prestart(args: Sequence[str]) -> contextlib.AbstractContextManager[None]:
    """For a command that will most likely start a session's daemon, that daemon's process
    started now (`gitsess.runtime.prestart`), before the command line's own modules load. A wrong
    guess costs a process that imports the overlay, on the other core, and exits."""
    if args and (args[0] in ("mount", "run") or (args[0] == "new" and "--mount" in args)):
        from gitsess.runtime import prestart

        return prestart.prestarted()
    return contextlib.nullcontext()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the CLI; every anticipated failure is one line on stderr, never a traceback.
    Called with `argv` (in process, as the tests do) it raises SystemExit as usual."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:
        # Click's own answer, without loading click: it would triple the time this takes.
        from gitsess import __version__

        sys.stdout.write(f"gitsess, version {__version__}\n")
        sys.exit(0)
    # A file name is bytes, as in git: one that is not UTF-8 is printed as those bytes.
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="surrogateescape")  # type: ignore[union-attr]
    with _prestart(args):
        from gitsess.cli.group import run

        code = run(args)
    if argv is None and threading.active_count() == 1 and not _observed():
        _exit_now(code)
    sys.exit(code)


def _observed() -> bool:
    """Whether a profiler or tracer runs this process (`python -m cProfile -m gitsess`):
    it writes its results after the program returns, so the process must return too."""
    return sys.getprofile() is not None or sys.gettrace() is not None


def _exit_now(code: int) -> NoReturn:
    """End the process without tearing the interpreter down: freeing the objects of every
    module (pygit2, click, rich) took 25-40 ms, a sixth of a `gitsess mount`. What an exit
    must still do runs: atexit's handlers (logging's flush, weakref finalizers such as a
    TemporaryDirectory's) and the standard streams' flush; no other thread is running."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
