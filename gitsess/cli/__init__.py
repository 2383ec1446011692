"""The command line: parse, call a service, render. Decisions belong to the services.

Commands live in modules by topic; importing a module registers its commands on the `cli`
group. The group imports a command's module only when that command runs: importing all of
them cost more than most commands do (pygit2, rich, the agent profiles, promote).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

import click

from gitsess import __version__
from gitsess.errors import GitsessError

# name: (module under gitsess.cli, the summary `gitsess --help` lists, None when hidden).
# `gitsess --help` prints these without importing the modules; tests/test_cli.py checks them
# against the commands themselves.
COMMANDS: dict[str, tuple[str, str | None]] = {
    "agents": (
        "agent_cmds",
        "List the agent roles of a session (default: of every session), with their state dirs.",
    ),
    "apply": (
        "promote_cmds",
        "Promote a session's changes: to a commit, a patch, or the real worktree.",
    ),
    "archives": (
        "promote_cmds",
        "List archived sessions (`rm` archives unapplied changes; `restore` brings them back).",
    ),
    "diff": (
        "promote_cmds",
        "Show what a session changed against its real worktree, content compared.",
    ),
    "discard": (
        "promote_cmds",
        "Drop a session's changes (all, or those PATHSPECs select; ignored paths included).",
    ),
    "doctor": ("machine_cmds", "Check what this machine and directory offer gitsess."),
    "fork": (
        "promote_cmds",
        "A new session NEW_NAME with a copy of a session's changes, on the same worktree.",
    ),
    "fs": (
        "inspect_cmds",
        "Read a session's files without mounting it: fs [SESSION] ls|cat|stat.",
    ),
    "gc": (
        "gc_cmds",
        "Clean up: sessions whose branch or worktree is gone, merged branches, changes a commit"
        " took, dead mounts, orphaned session and agent state dirs, archives older than"
        " gitsess.gc.archiveMaxAge (default 30 days).",
    ),
    "hook": ("hook_cmds", None),
    "hooks": (
        "hook_cmds",
        "Git hooks that let sessions follow what git does to their branches and worktrees.",
    ),
    "kv": (
        "inspect_cmds",
        "A session's key-value store of JSON values: kv [SESSION] get|set|rm|ls.",
    ),
    "log": ("inspect_cmds", "What happened in a session: its file changes, grouped by run."),
    "ls": ("session_cmds", "List sessions: this worktree's first, then the other worktrees'."),
    "mount": (
        "live_cmds",
        "Mount a session's view (at DIR, default its session dir) until `gitsess umount`.",
    ),
    "new": ("session_cmds", "Create a session (NAME, or a generated one; a UUID becomes its id)."),
    "ps": ("live_cmds", "List mounted sessions of this repository and who is inside."),
    "pull": (
        "remote_cmds",
        "Bring session NAME from a git remote (default: origin): a new session on a worktree of"
        " its branch, or a fast-forward of the one here.",
    ),
    "push": (
        "remote_cmds",
        "Publish a session on a git remote (default: the branch's remote, else origin), as a"
        " commit under refs/gitsess/sessions/NAME.",
    ),
    "rename": ("session_cmds", "Rename a session (its worktree and branch keep their names)."),
    "restore": ("promote_cmds", "Bring back a session archived as NAME (see `gitsess archives`)."),
    "rm": (
        "session_cmds",
        "Remove a session, and the worktree and branch gitsess made for it when nothing is lost.",
    ),
    "run": (
        "live_cmds",
        "Run COMMAND (default: $SHELL, or the agent's CLI) inside a session, creating or"
        " resuming it.",
    ),
    "show": ("session_cmds", "Show one session."),
    "stop": (
        "agent_cmds",
        "Forget an agent role: purge its state dir (conversations); shared files stay as they are.",
    ),
    "title": ("session_cmds", 'Set a session\'s title ("" clears it).'),
    "tour": ("machine_cmds", "Walk through gitsess on a demo repository in a temporary directory."),
    "umount": ("live_cmds", "Unmount a session's view (participants still inside lose it)."),
    "watch": (
        "inspect_cmds",
        "Watch a session's changes live, from any terminal, without joining it.",
    ),
}


class LazyGroup(click.Group):
    """Imports a command's module when the command is looked up (to run, complete or show its
    help); the group's own help lists the summaries of `COMMANDS` instead."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"{__name__}.{COMMANDS[cmd_name][0]}")
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        listed = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                summary = COMMANDS[name][1]
                # A stand-in, so that click shortens the summary as it would the real help.
                command = click.Command(name, help=summary, hidden=summary is None)
            if not command.hidden:
                listed.append((name, command))
        # The layout of click's own `Group.format_commands`.
        limit = formatter.width - 6 - max(len(name) for name, _ in listed)
        with formatter.section("Commands"):
            formatter.write_dl([(name, c.get_short_help_str(limit)) for name, c in listed])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gitsess")
def cli() -> None:
    """Named, resumable, copy-on-write sessions over a git worktree."""


def _fail(message: str, code: int = 1) -> int:
    click.echo(f"gitsess: {' '.join(message.splitlines())}", err=True)
    return code


def _library_error(e: Exception) -> str | None:
    """The message for an anticipated apsw or pygit2 error, None for anything else.

    Looked up in `sys.modules`: only the commands that use them import these libraries (pygit2
    alone costs more than `gitsess --version`), and an error of one that is not loaded cannot
    happen.
    """
    apsw = sys.modules.get("apsw")
    if apsw is not None and isinstance(e, apsw.Error):
        return f"session registry: {e}"
    pygit2 = sys.modules.get("pygit2")
    if pygit2 is not None and isinstance(e, pygit2.GitError):
        return f"git: {e}"
    return None


def _head_start(args: Sequence[str]) -> contextlib.AbstractContextManager[None]:
    """For a command that will most likely start a session's daemon, that daemon's process
    started now (`gitsess.mount.prestarted`). A wrong guess costs a process that imports the
    overlay, on the other core, and exits."""
    if args and (args[0] in ("mount", "run") or (args[0] == "new" and "--mount" in args)):
        from gitsess import mount

        return mount.prestarted()
    return contextlib.nullcontext()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run the CLI; every anticipated failure is one line on stderr, never a traceback.
    Called with `argv` (in process, as the tests do) it raises SystemExit as usual."""
    args = sys.argv[1:] if argv is None else list(argv)
    with _head_start(args):
        code = _run(args)
    if argv is None and threading.active_count() == 1:
        _exit_now(code)
    sys.exit(code)


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


def _run(args: list[str]) -> int:
    try:
        result = cli.main(args=args, prog_name="gitsess", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.Abort:
        return _fail("aborted")
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except GitsessError as e:
        return _fail(str(e))
    except BrokenPipeError:
        # The reader went away (`gitsess ls | head`): stop quietly, and keep Python's exit-time
        # flush from failing on the closed pipe again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:
        return _fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
    except Exception as e:
        message = _library_error(e)
        if message is None:
            raise
        return _fail(message)
