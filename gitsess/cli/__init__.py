"""The command line: parse, call a service, render. Decisions belong to the services.

Commands live in modules by topic; importing them registers them on the `cli` group.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import apsw
import click
import pygit2

from gitsess.cli import (
    agent_cmds,
    gc_cmds,
    hook_cmds,
    inspect_cmds,
    live_cmds,
    machine_cmds,
    promote_cmds,
    remote_cmds,
    session_cmds,
)
from gitsess.cli.base import cli
from gitsess.errors import GitsessError

__all__ = [
    "agent_cmds",
    "cli",
    "gc_cmds",
    "hook_cmds",
    "inspect_cmds",
    "live_cmds",
    "machine_cmds",
    "main",
    "promote_cmds",
    "remote_cmds",
    "session_cmds",
]


def _fail(message: str, code: int = 1) -> int:
    click.echo(f"gitsess: {' '.join(message.splitlines())}", err=True)
    return code


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the CLI; every anticipated failure is one line on stderr, never a traceback."""
    try:
        result = cli.main(args=argv, prog_name="gitsess", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except click.ClickException as e:
        e.show()
        code = e.exit_code
    except click.Abort:
        code = _fail("aborted")
    except KeyboardInterrupt:
        code = _fail("interrupted", 130)
    except GitsessError as e:
        code = _fail(str(e))
    except apsw.Error as e:
        code = _fail(f"session registry: {e}")
    except pygit2.GitError as e:
        code = _fail(f"git: {e}")
    except BrokenPipeError:
        # The reader went away (`gitsess ls | head`): stop quietly, and keep Python's exit-time
        # flush from failing on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except OSError as e:
        code = _fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
    sys.exit(code)
