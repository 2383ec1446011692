"""The command line: parse, call a service, render. Decisions belong to the services."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import apsw
import click
import pygit2
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gitsess import __version__, doctor, sessions, tour
from gitsess.errors import GitsessError
from gitsess.sessions import Session, SessionInfo, WorktreeSpec, discover

F = TypeVar("F", bound=Callable[..., Any])

_OFFSET = re.compile(r"-[0-9]+")
# Where a positional `-N` goes: click would otherwise take it for an unknown option.
_OFFSET_OPTION = "--session-offset"

# Messages never wrap (paths stay whole for copying); piped output is not cut to 80 columns.
console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


class SessionCommand(click.Command):
    """A command that takes a session, which may be given positionally as `-N`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _mark_offsets(self, args))


def _mark_offsets(command: click.Command, args: list[str]) -> list[str]:
    takes_value = {
        opt
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag
        for opt in param.opts
    }
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


def takes_session(f: F) -> F:
    """`--session/-s`, plus the hidden option that positional offsets are moved to."""
    f = click.option(_OFFSET_OPTION, "offsets", multiple=True, hidden=True)(f)
    return click.option(
        "--session",
        "-s",
        "session_option",
        metavar="SESSION",
        help="NAME, ID, ID prefix or -N (-1: newest). Default: $GITSESS_SESSION.",
    )(f)


def _session_ref(
    positional: Sequence[str], wanted: int, offsets: Sequence[str], option: str | None
) -> tuple[str | None, list[str]]:
    """Split `[SESSION] ARG...` (`wanted` ARGs) and merge the session's three spellings."""
    args = list(positional)
    if len(args) == wanted + 1:
        given = [args.pop(0)]
    elif len(args) == wanted:
        given = []
    else:
        raise click.UsageError(f"expected {wanted} argument(s) after the session, got {len(args)}")
    given += [*offsets, *([option] if option is not None else [])]
    if len(given) > 1:
        raise click.UsageError(f"give one session, not {len(given)}: {' '.join(given)}")
    return (given[0] if given else None), args


def _json(data: object) -> None:
    def plain(value: object) -> object:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"cannot encode {type(value).__name__}")

    click.echo(json.dumps(data, indent=2, default=plain))


def _info_json(info: SessionInfo) -> dict[str, object]:
    fields = asdict(info)
    return {**fields.pop("session"), **fields}


def _ago(when: datetime) -> str:
    seconds = int((datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def _short(commit: str | None) -> str:
    return commit[:10] if commit else "(no commit)"


def _branch(session: Session) -> str:
    return session.branch or f"detached {_short(session.base_commit)}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gitsess")
def cli() -> None:
    """Named, resumable, copy-on-write sessions over a git worktree."""


@cli.command()
@click.argument("name", required=False)
@click.option("--title", "-t", default="", help="A line saying what the session is for.")
@click.option(
    "--worktree",
    "worktree_branch",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[BRANCH]",
    help="Work in a new worktree on a new branch (default gitsess/NAME).",
)
@click.option("--from", "from_rev", metavar="REV", help="Start the new branch here (default HEAD).")
@click.option("--read-only", is_flag=True, help="Open the session read-only by default.")
@click.option("--json", "as_json", is_flag=True, help="Print the session as JSON.")
def new(
    name: str | None,
    title: str,
    worktree_branch: str | None,
    from_rev: str | None,
    read_only: bool,
    as_json: bool,
) -> None:
    """Create a session (NAME, or a generated one; a UUID becomes its id)."""
    if from_rev is not None and worktree_branch is None:
        raise click.UsageError("--from only applies with --worktree")
    spec = None if worktree_branch is None else WorktreeSpec(worktree_branch or None, from_rev)
    session = sessions.create(discover(), name, title=title, worktree=spec, read_only=read_only)
    if as_json:
        _json(asdict(session))
        return
    where = "new worktree" if session.created_worktree else "worktree"
    console.print(
        f"Created session [bold]{escape(session.name)}[/] ({session.id[:8]}) on "
        f"{escape(_branch(session))} in {where} {escape(str(session.worktree))}"
    )


@cli.command("ls")
@click.option("--everywhere", "-a", is_flag=True, help="Sessions of every repository of yours.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ls(everywhere: bool, as_json: bool) -> None:
    """List sessions: this worktree's first, then the other worktrees'."""
    if everywhere:
        repos = sessions.list_everywhere()
        if as_json:
            _json(
                [
                    {
                        "repo": repo.common_dir,
                        "error": repo.error,
                        "sessions": [_info_json(i) for i in repo.sessions],
                    }
                    for repo in repos
                ]
            )
            return
        if not repos:
            console.print("No sessions in any repository.")
        for repo in repos:
            console.print(f"[bold]{escape(str(repo.common_dir))}[/]")
            if repo.error:
                console.print(f"  [red]{escape(repo.error)}[/]")
            else:
                console.print(_table(repo.sessions, with_worktree=True))
        return
    ctx = discover()
    infos = sessions.list_sessions(ctx)
    if as_json:
        _json([_info_json(i) for i in infos])
        return
    if not infos:
        console.print(f"No sessions in {escape(str(ctx.common_dir))} yet. Create one: gitsess new")
        return
    here = [i for i in infos if i.here]
    others = [i for i in infos if not i.here]
    if here:
        console.print(f"[bold]This worktree[/] {escape(str(here[0].session.worktree))}")
        console.print(_table(here, with_worktree=False))
    if others:
        console.print("[bold]Other worktrees[/]")
        console.print(_table(others, with_worktree=True))


def _table(infos: Sequence[SessionInfo], *, with_worktree: bool) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("#", "NAME", "ID", "BRANCH", "CHANGES", "LAST USED"):
        table.add_column(column, no_wrap=True)
    if with_worktree:
        table.add_column("WORKTREE", overflow="fold", min_width=16)
    table.add_column("TITLE", no_wrap=True, overflow="ellipsis", max_width=40)
    for info in infos:
        s = info.session
        name = escape(s.name) + ("" if s.state == "active" else f" [dim]({escape(s.state)})[/]")
        row = [
            str(info.offset),
            name,
            s.id[:8],
            escape(_branch(s)),
            "-" if info.changed_files is None else str(info.changed_files),
            _ago(s.last_used_at),
        ]
        if with_worktree:
            gone = "" if info.worktree_exists else " [red](missing)[/]"
            row.append(escape(str(s.worktree)) + gone)
        row.append(escape(s.title))
        table.add_row(*row)
    return table


@cli.command(cls=SessionCommand)
@click.argument("session", required=False)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """Show one session."""
    ref, _ = _session_ref([session] if session else [], 0, offsets, session_option)
    info = sessions.info(discover(), ref)
    if as_json:
        _json(_info_json(info))
        return
    s = info.session
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows = [
        ("name", s.name),
        ("id", s.id),
        ("title", s.title or "-"),
        ("offset", str(info.offset)),
        ("state", s.state + (", read-only" if s.read_only else "")),
        ("worktree", str(s.worktree) + ("" if info.worktree_exists else " (missing)")),
        ("branch", s.branch or "(detached HEAD)"),
        ("base commit", _short(s.base_commit)),
        ("made by gitsess", _made(s)),
        ("created", f"{s.created_at:%Y-%m-%d %H:%M:%S} UTC ({_ago(s.created_at)})"),
        ("last used", f"{s.last_used_at:%Y-%m-%d %H:%M:%S} UTC ({_ago(s.last_used_at)})"),
        ("changes", "-" if info.changed_files is None else str(info.changed_files)),
        ("session dir", str(info.session_dir)),
    ]
    for key, value in rows:
        grid.add_row(key, escape(value))
    console.print(grid)


def _made(session: Session) -> str:
    made = [
        what
        for what, flag in (
            ("worktree", session.created_worktree),
            ("branch", session.created_branch),
        )
        if flag
    ]
    return " and ".join(made) or "nothing (bound to an existing worktree)"


@cli.command(cls=SessionCommand)
@click.argument("session", required=False)
@takes_session
@click.option(
    "--force", is_flag=True, help="Also remove a gitsess-made worktree and branch holding work."
)
def rm(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, force: bool
) -> None:
    """Remove a session, and the worktree and branch gitsess made for it when nothing is lost."""
    ref, _ = _session_ref([session] if session else [], 0, offsets, session_option)
    removal = sessions.remove(discover(), ref, force=force)
    s = removal.session
    console.print(f"Removed session [bold]{escape(s.name)}[/] ({s.id[:8]})")
    if removal.removed_worktree:
        console.print(f"Removed worktree {escape(str(s.worktree))}")
    if removal.removed_branch:
        console.print(f"Deleted branch {escape(s.branch or '')}")
    for note in removal.notes:
        click.echo(f"gitsess: {note}", err=True)


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION] NEW_NAME")
@takes_session
def rename(args: tuple[str, ...], offsets: tuple[str, ...], session_option: str | None) -> None:
    """Rename a session (its worktree and branch keep their names)."""
    ref, (new_name,) = _session_ref(args, 1, offsets, session_option)
    session = sessions.rename(discover(), ref, new_name)
    console.print(f"Session {session.id[:8]} is now named [bold]{escape(session.name)}[/]")


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION] TEXT")
@takes_session
def title(args: tuple[str, ...], offsets: tuple[str, ...], session_option: str | None) -> None:
    """Set a session's title ("" clears it)."""
    ref, (text,) = _session_ref(args, 1, offsets, session_option)
    session = sessions.set_title(discover(), ref, text)
    console.print(
        f"Session [bold]{escape(session.name)}[/]: {escape(session.title or '(no title)')}"
    )


@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def doctor_command(ctx: click.Context, as_json: bool) -> None:
    """Check what this machine and directory offer gitsess."""
    checks = doctor.run_checks()
    if as_json:
        _json([asdict(c) for c in checks])
    else:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("CHECK", "VERDICT", "DETAIL"):
            table.add_column(column)
        styles = {"ok": "green", "warn": "yellow", "fail": "bold red"}
        for c in checks:
            verdict = f"[{styles[c.verdict]}]{c.verdict.upper()}[/]"
            table.add_row(c.name, verdict, escape(c.detail))
        console.print(table)
    if any(c.verdict == "fail" for c in checks):
        ctx.exit(1)


@cli.command("tour")
@click.pass_context
def tour_command(ctx: click.Context) -> None:
    """Walk through gitsess on a demo repository in a temporary directory."""
    ctx.exit(tour.run(console.print))


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
