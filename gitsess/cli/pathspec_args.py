"""The arguments of the commands that take `[SESSION] [--] [PATHSPEC...]` (diff, apply, discard).

The first word is the session when it resolves to one, else a pathspec; a word that is both, or
neither, is a usage error (git's rule for revisions and paths), which `--` or `-s` settles.
`PathspecCommand` keeps what follows `--` aside before click parses. Pathspecs relative to the
current directory are made root-relative here (`root_pathspecs`), since the services take git's
root-relative ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from gitsess.cli.base import (
    SessionCommand,
    session_ref,
    value_options,
)
from gitsess.services import apply as applying
from gitsess.services import sessions
from gitsess.services.handle import SessionHandle
from gitsess.services.sessions import RepoContext, Session

_AFTER = "gitsess.after_dashdash"

PATHSPEC_HELP = """
The first argument is the session if it names one, else the first pathspec; a name that is
both a session and a path here is an error. Put pathspecs after `--` (`gitsess diff exp --
src`) or name the session with -s to leave no doubt; after `--`, pathspecs need not match any
file. Pathspecs are git's, relative to the current directory (`:/` and `:(top)` start at the
top, `:!` excludes, `*` globs).
"""


class PathspecCommand(SessionCommand):
    """`[SESSION] [--] [PATHSPEC...]`: what follows `--` is kept aside as pathspecs."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        before, after = _split_dashdash(self, args)
        ctx.meta[_AFTER] = after
        return super().parse_args(ctx, before)


def _split_dashdash(command: click.Command, args: list[str]) -> tuple[list[str], list[str] | None]:
    takes_value = value_options(command)
    before: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            return before, list(rest)
        before.append(arg)
        if arg in takes_value:
            value = next(rest, None)
            if value is not None:
                before.append(value)
    return before, None


def split_positional(
    positional: Sequence[str],
    after: Sequence[str] | None,
    *,
    explicit: bool,
    is_session: Callable[[str], bool],
    is_path: Callable[[str], bool],
) -> tuple[str | None, list[str]]:
    """(the positional session or None, the pathspecs), by the rule in PATHSPEC_HELP.

    `after` is what followed `--` (None without `--`); `explicit` says the session was given
    with -s or -N.
    """
    if after is not None:
        if len(positional) > 1 or (positional and explicit):
            raise click.UsageError("only the session goes before `--`; pathspecs go after it")
        return (positional[0] if positional else None), list(after)
    if explicit or not positional:
        return None, list(positional)
    first = positional[0]
    if is_session(first):
        if is_path(first):
            raise click.UsageError(
                f"{first!r} is both a session and a path here: use -s SESSION, or put "
                "pathspecs after `--`"
            )
        return first, list(positional[1:])
    if is_path(first) or first.startswith(":") or any(c in first for c in "*?["):
        return None, list(positional)
    raise click.UsageError(
        f"{first!r} is neither a session nor a path here; put pathspecs that match no file "
        "after `--`"
    )


def target(
    ctx: RepoContext,
    positional: Sequence[str],
    offsets: Sequence[str],
    option: str | None,
) -> tuple[SessionHandle, list[str]]:
    """The session and its root-relative pathspecs from a command's arguments."""
    found: dict[str, Session] = {}  # (what `is_session` resolved is the session, when it is)

    def is_session(text: str) -> bool:
        # Only "no such session": a registry that cannot be read is that error, not a guess.
        try:
            found[text] = sessions.resolve(ctx, text)
        except sessions.NoSuchSession:
            return False
        return True

    after = click.get_current_context().meta.get(_AFTER)
    first, specs = split_positional(
        positional,
        after,
        explicit=bool(offsets) or option is not None,
        is_session=is_session,
        is_path=os.path.lexists,
    )
    ref, _ = session_ref([first] if first is not None else [], 0, offsets, option)
    row = found.get(ref) if ref is not None else None
    handle = SessionHandle(ctx, row or sessions.resolve(ctx, ref))
    if not specs:
        return handle, []
    roots = [handle.row.worktree, handle.mountpoint()]
    if ctx.worktree is not None:
        roots.append(ctx.worktree)
    return handle, applying.root_pathspecs(specs, Path.cwd(), roots)
