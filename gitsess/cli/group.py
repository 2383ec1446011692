"""The click group of every command, and how a command's failure becomes one line.

Commands live in modules by topic; importing a module registers its commands on the `cli`
group. The group imports a command's module only when that command runs (or completes, or shows
its own help): importing all of them cost more than most commands do (pygit2, rich, the agent
profiles, apply). `COMMANDS` maps each command to its module and the summary `--help` lists;
tests check it against the commands. `GitsessError`, and the apsw, pygit2 and OS errors that
can be anticipated (`one_line`), become `gitsess: <message>` on stderr and exit 1; usage errors
are click's (exit 2); a traceback means a bug. A command's `sys.exit(code)` is returned to
`main`, so `run` passes its command's code on and still skips the interpreter's teardown.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import click

from gitsess import __version__
from gitsess.errors import GitsessError
from gitsess.services import sealed
from gitsess.suggest import did_you_mean

# name: (module under gitsess.cli, the summary `gitsess --help` lists, None when hidden).
# `gitsess --help` prints these without importing the modules; each command takes its summary
# from here when it registers. Short enough that an 80-column help never cuts one.
COMMANDS: dict[str, tuple[str, str | None]] = {
    "agents": ("agent_cmds", "List agent roles and their state dirs."),
    "apply": ("apply_cmds", "Apply changes: to a commit, a patch or the real worktree."),
    "archives": ("archive_cmds", "List archived sessions (restore brings one back)."),
    "checkpoint": ("checkpoint_cmds", "Make a checkpoint of a session, mounted or not."),
    "checkpoints": ("checkpoint_cmds", "List a session's checkpoints."),
    "completion": ("completion_cmds", "Print shell code that completes gitsess's words."),
    "diff": ("diff_cmds", "Show what a session changed against the real worktree."),
    "discard": ("discard_cmds", "Drop a session's changes (all, or some paths)."),
    "doctor": ("machine_cmds", "Check what this machine and directory offer gitsess."),
    "fork": ("archive_cmds", "Copy a session's changes into a new session."),
    "fs": ("inspect_cmds", "Read a session's files without mounting it."),
    "gc": ("gc_cmds", "Clean up sessions, mounts and archives left behind."),
    "hook": ("hook_cmds", None),
    "hooks": ("hook_cmds", "Git hooks that keep sessions in step with git."),
    "kv": ("kv_cmds", "A session's key-value store of JSON values."),
    "log": ("inspect_cmds", "What happened in a session, grouped by run."),
    "ls": ("session_cmds", "List sessions, this worktree's first."),
    "mcp": ("mcp_cmds", "Serve gitsess's tools to agents over MCP (stdio)."),
    "mount": ("live_cmds", "Mount a session's view until `gitsess umount`."),
    "new": ("session_cmds", "Create a session."),
    "overlaps": ("radar_cmds", "Show which sessions would conflict if applied."),
    "ps": ("live_cmds", "List mounted sessions and who is inside."),
    "pull": ("remote_cmds", "Bring a session from a git remote."),
    "push": ("remote_cmds", "Publish a session on a git remote."),
    "rename": ("session_cmds", "Rename a session."),
    "restore": ("archive_cmds", "Bring back an archived session."),
    "rewind": ("checkpoint_cmds", "Bring a session back to a checkpoint; undo reverses it."),
    "rm": ("session_cmds", "Remove a session (its unapplied changes are archived)."),
    "run": ("live_cmds", "Run a command inside a session, creating or resuming it."),
    "show": ("session_cmds", "Show one session."),
    "stop": ("agent_cmds", "Forget an agent role and purge its state dir."),
    "title": ("session_cmds", "Set a session's title."),
    "tour": ("machine_cmds", "Walk through gitsess on a demo repository."),
    "umount": ("live_cmds", "Unmount a session's view."),
    "undo": ("checkpoint_cmds", "Undo the last run, rewind or undo."),
    "watch": ("inspect_cmds", "Watch a session's changes live."),
}

# A command's help ends with these (`gitsess COMMAND --help`).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "agents": ("gitsess agents", "gitsess agents exp --json"),
    "apply": (
        'gitsess apply exp --commit -m "Parse lines"',
        "gitsess apply exp --patch -o exp.patch -- src/",
    ),
    "archives": ("gitsess archives", "gitsess restore exp --as exp-again"),
    "checkpoint": ('gitsess checkpoint exp -m "before the refactor"',),
    "checkpoints": ("gitsess checkpoints exp", "gitsess checkpoints exp --json"),
    "completion": ('eval "$(gitsess completion bash)"',),
    "diff": ("gitsess diff exp", "gitsess diff exp --stat -- src/"),
    "discard": ("gitsess discard exp -- build/", "gitsess discard exp --all -y"),
    "doctor": ("gitsess doctor", "gitsess doctor --repair"),
    "fork": ("gitsess fork exp exp-b",),
    "fs": ("gitsess fs exp ls src", "gitsess fs exp cat README.md"),
    "gc": ("gitsess gc --dry-run", "gitsess gc"),
    "hooks": ("gitsess hooks install", "gitsess hooks uninstall"),
    "kv": ('gitsess kv exp set status "tests pass"', "gitsess kv exp get status"),
    "log": ("gitsess log exp --since 10m", "gitsess log exp --op unlink --json"),
    "ls": ("gitsess ls", "gitsess ls --everywhere"),
    "mount": ("gitsess mount exp", "gitsess mount exp ~/views/exp"),
    "mcp": ("gitsess mcp", "claude mcp add gitsess -- gitsess mcp"),
    "overlaps": ("gitsess overlaps", "gitsess overlaps --json"),
    "new": ('gitsess new exp -t "try a faster parser"', "gitsess new exp --worktree --mount"),
    "ps": ("gitsess ps",),
    "pull": ("gitsess pull exp", "gitsess pull exp upstream --worktree"),
    "push": ("gitsess push exp", "gitsess push exp origin --with-kv"),
    "rename": ("gitsess rename exp parser",),
    "restore": ("gitsess restore exp", "gitsess restore exp --as exp-again"),
    "rewind": ("gitsess rewind exp 3", "gitsess rewind exp 3 -- src/"),
    "rm": ("gitsess rm exp", "gitsess rm -1 --force"),
    "run": ("gitsess run -s exp -- pytest", "gitsess run -s exp --agent claude --role reviewer"),
    "show": ("gitsess show exp", "gitsess show -1 --json"),
    "stop": ("gitsess stop exp --role reviewer",),
    "title": ('gitsess title exp "parse twice as fast"',),
    "tour": ("gitsess tour",),
    "umount": ("gitsess umount exp",),
    "undo": ("gitsess undo exp",),
    "watch": ("gitsess watch exp", "gitsess watch exp --json"),
}


class LazyGroup(click.Group):
    """Imports a command's module when the command is looked up (to run, complete or show its
    help); the group's own help lists the summaries of `COMMANDS` instead."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """A command registers with the summary and examples of the tables above."""
        key = name or cmd.name
        if key in COMMANDS:
            cmd.short_help = COMMANDS[key][1]
        if key in EXAMPLES and not cmd.hidden:
            lines = "\n".join(f"  {line}" for line in EXAMPLES[key])
            # \b keeps click from rewrapping the lines.
            cmd.epilog = (cmd.epilog or "") + f"\n\n\b\nExamples:\n{lines}"
        super().add_command(cmd, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        known = name in COMMANDS or name in self.commands
        if not known and not name.startswith("-") and not ctx.resilient_parsing:
            hint = did_you_mean(name, self.list_commands(ctx))
            raise click.UsageError(f"No such command {name!r}{hint or '.'}", ctx)
        return super().resolve_command(ctx, args)

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


_NO_SPACE = "git: no space left on the device (writing git objects or refs failed)"


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
        # libgit2 reports a failed write of an object or a ref on a full disk as "no error",
        # or as whatever error it set last and recovered from ("could not find ... to touch",
        # of an object it looked for before writing it).
        if _disk_full():
            return _NO_SPACE
        if str(e).strip().lower() in ("", "no error"):
            return "git: an object or ref could not be written (libgit2 gave no reason)"
        return f"git: {e}"
    return None


def _disk_full() -> bool:
    from gitsess.durable import nearly_full

    try:
        where = os.getcwd()
    except OSError:
        where = "/"
    return nearly_full(where)


def one_line(e: Exception) -> str | None:
    """The message `run` shows for an anticipated error, None for anything else (a bug)."""
    if isinstance(e, GitsessError):
        return str(e)
    if isinstance(e, OSError):
        return _os_error(e)
    return _library_error(e)


def _os_error(e: OSError) -> str:
    if e.filename:
        return f"{e.filename}: {e.strerror}"
    # libgit2's errors of the OS come as an OSError holding its message alone (no errno): on a
    # full disk, whatever it set last, as for its other errors (`_library_error`)
    if e.errno is None and "pygit2" in sys.modules and _disk_full():
        return _NO_SPACE
    return str(e)


def _progress_bars() -> contextlib.AbstractContextManager[None]:
    """Bars on stderr for long work, when it is a terminal (logs get none); their module
    loads only then."""
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from gitsess.cli.progress_bars import bars

    return bars()


def run(args: list[str]) -> int:
    """The command `args` asks for, run; its exit code."""
    refused = sealed.refusal(args, os.environ)
    if refused is not None:
        return _fail(refused)
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
        return _fail(_os_error(e))
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
