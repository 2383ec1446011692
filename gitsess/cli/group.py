"""The click group of every command, and how a command's failure becomes one line.

Commands live in modules by topic; importing a module registers its commands on the `cli`
group. The group imports a command's module only when that command runs: importing all of
them cost more than most commands do (pygit2, rich, the agent profiles, apply).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

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
        "apply_cmds",
        "Apply a session's changes: to a commit, a patch, or the real worktree.",
    ),
    "archives": (
        "apply_cmds",
        "List archived sessions (`rm` archives unapplied changes; `restore` brings them back).",
    ),
    "diff": (
        "apply_cmds",
        "Show what a session changed against its real worktree, content compared.",
    ),
    "discard": (
        "apply_cmds",
        "Drop a session's changes (all, or those PATHSPECs select; ignored paths included).",
    ),
    "doctor": ("machine_cmds", "Check what this machine and directory offer gitsess."),
    "fork": (
        "apply_cmds",
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
    "restore": ("apply_cmds", "Bring back a session archived as NAME (see `gitsess archives`)."),
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
            importlib.import_module(f"{__package__}.{COMMANDS[cmd_name][0]}")
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
    if isinstance(e, UnicodeError):
        # the last net under names and text that are not UTF-8 (an argument's bytes)
        return f"not UTF-8 text where text is needed: {e}"
    apsw = sys.modules.get("apsw")
    if apsw is not None and isinstance(e, apsw.Error):
        return f"session registry: {e}"
    pygit2 = sys.modules.get("pygit2")
    if pygit2 is not None and isinstance(e, pygit2.GitError):
        return f"git: {e}"
    return None


def _progress_bars() -> contextlib.AbstractContextManager[None]:
    """Bars on stderr for long work, when it is a terminal (logs get none); their module
    loads only then."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from gitsess.cli.progress_bars import bars

    return bars()


def run(args: list[str]) -> int:
    """The command `args` asks for, run; its exit code."""
    try:
        with _progress_bars():
            result = cli.main(args=args, prog_name="gitsess", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except SystemExit as e:
        # A command that ends with sys.exit(code), as `run` does with its command's code: the
        # code is returned like any other, so that `main` ends the process its own way.
        return _exit_code(e.code)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.Abort:
        return _fail("aborted")
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except GitsessError as e:
        return _fail(str(e), e.exit_code)
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


def _exit_code(code: object) -> int:
    """What Python makes of `sys.exit(code)`: None is 0, a number itself, anything else is
    printed to stderr and exits 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    click.echo(code, err=True)
    return 1
