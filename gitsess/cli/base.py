"""What every command shares: session arguments, rendering helpers.

Every command that takes a session accepts `[SESSION]` positionally and `--session/-s`; giving
both is a usage error. Click would read a positional `-1` as an unknown option, so
`SessionCommand` rewrites a bare `-N` (before `--`, not an option's value) into a hidden
`--session-offset`. Commands with more arguments take `[SESSION] ARG...`: one more argument
than required is the session.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gitsess.services.sessions import SESSION_ENV, RepoContext, Session, SessionInfo

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem
    from rich.console import Console

    from gitsess.services.sessions import WorktreeSpec

F = TypeVar("F", bound=Callable[..., Any])

_OFFSET = re.compile(r"-[0-9]+")
# Where a positional `-N` goes: click would otherwise take it for an unknown option.
_OFFSET_OPTION = "--session-offset"


@functools.cache
def console() -> Console:
    """Where commands print rich text. Made on first use: importing rich takes about as long as
    `gitsess new` runs, so `new` and `mount` print with click and never load it."""
    from rich.console import Console

    # Messages never wrap (paths stay whole for copying); piped output is not cut to 80 columns.
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def echo_mounted(session: Session, mountpoint: str) -> None:
    """The line `mount` and `new --mount` end with (with click, not rich: see `console`)."""
    click.echo(f"Session {click.style(session.name, bold=True)} is mounted at {mountpoint}")


# C0 and C1 controls and DEL: a terminal acts on them (an escape sequence can retitle the window,
# rewrite what is shown, or worse), and titles, paths and authors come from commands and remotes.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def escape(text: str) -> str:
    """Text made safe to print with rich: its markup escaped (rich is loaded with it, see
    `console`), control characters shown as `\\xNN` instead of sent to the terminal."""
    from rich.markup import escape as rich_escape

    return rich_escape(_CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def first_line(text: str) -> str:
    """A title as one line: its first, marked when more followed."""
    lines = text.splitlines() or [""]
    return lines[0] + (" …" if len(lines) > 1 else "")


class SessionCommand(click.Command):
    """A command that takes a session, which may be given positionally as `-N`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _mark_offsets(self, args))


def value_options(command: click.Command) -> set[str]:
    """The option spellings of `command` that take the next argument as their value."""
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag
        for opt in param.opts
    }


def _mark_offsets(command: click.Command, args: list[str]) -> list[str]:
    takes_value = value_options(command)
    marked: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            marked += [arg, *rest]
        elif _OFFSET.fullmatch(arg):
            marked.append(f"{_OFFSET_OPTION}={arg}")
        else:
            marked.append(arg)
            if arg in takes_value:
                value = next(rest, None)
                if value is not None:
                    marked.append(value)
    return marked


def _items(names: Sequence[str]) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    return [CompletionItem(n) for n in names]


def complete_session(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Completes a session's name (shell completion loads the services; a command does not)."""
    return _session_items(incomplete)


def _session_items(incomplete: str) -> list[CompletionItem]:
    from gitsess.services import completion

    return _items(completion.sessions(incomplete))


def complete_archive(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from gitsess.services import completion

    return _items(completion.archives(incomplete))


def complete_remote(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from gitsess.services import completion

    return _items(completion.remotes(incomplete))


def complete_session_or_remote(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """For `[SESSION] [REMOTE]`: the first word may be either, the second is the remote."""
    from gitsess.services import completion

    if param.name is not None and ctx.params.get(param.name):
        return complete_remote(ctx, param, incomplete)
    return _items([*completion.sessions(incomplete), *completion.remotes(incomplete)])


def complete_agent_kind(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    from gitsess.services import completion

    return _items(completion.agent_kinds(incomplete))


def complete_role(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The roles of the session given so far (positionally or with -s), else of every one."""
    from gitsess.services import completion

    given = ctx.params.get("session") or ctx.params.get("session_option")
    offsets = ctx.params.get("offsets") or ()
    return _items(completion.roles(incomplete, given or (offsets[0] if offsets else None)))


def complete_session_first(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """For `[SESSION] ARG...`: a session's name first, then the shell's file names where the
    arguments are paths (`[SESSION] [DIR]`, pathspecs), else nothing (a new name, a title)."""
    from click.shell_completion import CompletionItem

    if param.name is None or not ctx.params.get(param.name):
        return complete_session(ctx, param, incomplete)
    paths = any(word in (param.metavar or "") for word in ("PATHSPEC", "DIR"))
    return [CompletionItem(incomplete, type="file")] if paths else []


def takes_session(f: F) -> F:
    """`--session/-s`, plus the hidden option that positional offsets are moved to."""
    f = click.option(_OFFSET_OPTION, "offsets", multiple=True, hidden=True)(f)
    return click.option(
        "--session",
        "-s",
        "session_option",
        metavar="SESSION",
        help="NAME, ID, ID prefix or -N (-1: newest). Default: $GITSESS_SESSION.",
        shell_complete=complete_session,
    )(f)


def takes_worktree(f: F) -> F:
    """`--worktree [BRANCH]` and `--from REV`, which `worktree_spec` turns into a spec."""
    f = click.option(
        "--from", "from_rev", metavar="REV", help="Start the new branch here (default HEAD)."
    )(f)
    return click.option(
        "--worktree",
        "worktree_branch",
        is_flag=False,
        flag_value="",
        default=None,
        metavar="[BRANCH]",
        help="A new session works in a new worktree on a new branch (default gitsess/NAME).",
    )(f)


# Where `SessionGroup` moves a leading positional session, so that click does not take it for
# the subcommand's name.
_SESSION_ARG = "--session-arg"


class SessionGroup(click.Group):
    """A group that takes a session before its subcommand: `kv [SESSION] get KEY`.

    A first argument that is no subcommand is the session; a session named like a subcommand
    is given with `-s`.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = args[0] if args else None
        offset = first is not None and first.startswith("-") and first[1:].isdigit()
        if first is not None and first not in self.commands and (offset or first[:1] != "-"):
            args = [f"{_SESSION_ARG}={first}", *args[1:]]
        return super().parse_args(ctx, args)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Subcommands, and before one, the session's name."""
        found = super().shell_complete(ctx, incomplete)
        if ctx.params.get("session_arg") is None and ctx.params.get("session_option") is None:
            found += _session_items(incomplete)
        return found


def group_session(f: F) -> F:
    """A `SessionGroup`'s session: positional (moved to a hidden option) or `--session/-s`."""
    f = click.option(_SESSION_ARG, "session_arg", hidden=True)(f)
    return click.option(
        "--session",
        "-s",
        "session_option",
        metavar="SESSION",
        help="NAME, ID, ID prefix or -N (-1: newest). Default: $GITSESS_SESSION.",
        shell_complete=complete_session,
    )(f)


def session_of(ref: str | None) -> tuple[RepoContext, Session]:
    from gitsess.services import sessions

    ctx = sessions.discover()
    return ctx, sessions.resolve(ctx, ref)


def group_ref() -> str | None:
    """The session given to the `fs` or `kv` group (its context's obj, which subcommands share)."""
    ref: str | None = click.get_current_context().obj
    return ref


def worktree_spec(worktree_branch: str | None, from_rev: str | None) -> WorktreeSpec | None:
    if from_rev is not None and worktree_branch is None:
        raise click.UsageError("--from only applies with --worktree")
    if worktree_branch is None:
        return None
    from gitsess.services import sessions

    return sessions.worktree_spec(worktree_branch or None, from_rev)


def session_ref(
    positional: Sequence[str], wanted: int, offsets: Sequence[str], option: str | None
) -> tuple[str | None, list[str]]:
    """Split `[SESSION] ARG...` (`wanted` ARGs) and merge the session's three spellings."""
    args = list(positional)
    elsewhere = [*offsets, *([option] if option is not None else [])]
    if len(args) == wanted + 1:
        given = [args.pop(0)]
    elif len(args) == wanted and (elsewhere or os.environ.get(SESSION_ENV) or not wanted):
        given = []
    elif len(args) <= wanted:
        # `rename s`: the one word is the session (nothing else names one), NEW_NAME is missing.
        raise click.UsageError(f"missing {_missing(wanted - len(args) + (not elsewhere))}")
    else:
        raise click.UsageError(f"expected {wanted} argument(s) after the session, got {len(args)}")
    given += elsewhere
    if len(given) > 1:
        raise click.UsageError(f"give one session, not {len(given)}: {' '.join(given)}")
    return (given[0] if given else None), args


def _missing(count: int) -> str:
    """The last `count` words of the running command's `[SESSION] WORD...` metavar, before
    an optional part after the words (rewind's `[-- PATHSPEC...]` read "missing PATHSPEC...]")."""
    words = next(
        (
            _required((p.metavar or "").split(" "))
            for p in click.get_current_context().command.params
            if isinstance(p, click.Argument) and p.nargs == -1
        ),
        [],
    )
    return " ".join(words[-count:]) if words else "an argument"


def _required(words: list[str]) -> list[str]:
    """`[SESSION]` and the words after it up to the first optional one."""
    rest = words[1:]
    cut = next((n for n, w in enumerate(rest) if w.startswith("[")), len(rest))
    return words[:1] + rest[:cut]


def echo_notes(notes: Sequence[str]) -> None:
    for note in notes:
        click.echo(f"gitsess: {note}", err=True)


def write_bytes(data: bytes) -> None:
    # patches are bytes (content need not be UTF-8): past the text layer, after what it holds
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def print_json(data: object) -> None:
    click.echo(json_text(data))


def json_text(data: object) -> str:
    """What `--json` prints (and the MCP server answers): paths and times as strings."""
    import json  # (`ls` and `show` print tables more often)

    def plain(value: object) -> object:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"cannot encode {type(value).__name__}")

    return json.dumps(data, indent=2, default=plain)


def info_json(info: SessionInfo) -> dict[str, object]:
    fields = asdict(info)
    return {**fields.pop("session"), **fields}


def ago(when: datetime) -> str:
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def short(commit: str | None) -> str:
    return commit[:10] if commit else "(no commit)"


def branch_label(session: Session) -> str:
    return session.branch or f"detached {short(session.base_commit)}"
