"""Commands that manage sessions: new, ls, show, rm, rename, title.

`ls` and `show` import what only they need (the overlay's readers, rich tables) themselves:
`new` is meant to take well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING

import click

from gitsess.cli import table
from gitsess.cli.base import (
    SessionCommand,
    ago,
    branch_label,
    complete_remote,
    complete_session,
    complete_session_first,
    console,
    echo_mounted,
    escape,
    first_line,
    info_json,
    print_json,
    session_ref,
    short,
    takes_session,
    takes_worktree,
    worktree_spec,
)
from gitsess.cli.group import cli
from gitsess.services import sessions
from gitsess.services.sessions import RepoContext, Session, SessionInfo, discover

if TYPE_CHECKING:
    from gitsess.services import inspection
    from gitsess.services.inspection import OwnCommit
    from gitsess.services.sessions import RepoContext
    from gitsess.services.timeline import Drift

# git runs no hook on `git worktree remove`: what catches it up is the next hook, or gc
GONE = "(missing; `gitsess gc` archives the session)"


@cli.command()
@click.argument("name", required=False)
@click.option("--title", "-t", default="", help="A line saying what the session is for.")
@takes_worktree
@click.option("--read-only", is_flag=True, help="Open the session read-only by default.")
@click.option(
    "--mount",
    "and_mount",
    is_flag=True,
    help="Also mount it until `gitsess umount`, as `gitsess mount` does (read-only with"
    " --read-only).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the session as JSON.")
def new(
    name: str | None,
    title: str,
    worktree_branch: str | None,
    from_rev: str | None,
    read_only: bool,
    and_mount: bool,
    as_json: bool,
) -> None:
    """Create a session (NAME, or a generated one; a UUID becomes its id)."""
    spec = worktree_spec(worktree_branch, from_rev)
    ctx = discover()
    session = sessions.create(ctx, name, title=title, worktree=spec, read_only=read_only)
    mountpoint = None
    if and_mount:
        from gitsess.services import live

        mountpoint = live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=read_only
        ).mountpoint
    if as_json:
        print_json({**asdict(session), **({"mountpoint": mountpoint} if and_mount else {})})
        return
    where = "new worktree" if session.created_worktree else "worktree"
    # click, not rich: see `console`.
    click.echo(
        f"Created session {click.style(session.name, bold=True)} ({session.id[:8]}) on "
        f"{branch_label(session)} in {where} {session.worktree}"
    )
    if mountpoint is not None:
        echo_mounted(session, mountpoint)


@cli.command("ls")
@click.option("--everywhere", "-a", is_flag=True, help="Sessions of every repository of yours.")
@click.option(
    "--remote",
    "remote",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[REMOTE]",
    help="Sessions a git remote carries (default: origin).",
    shell_complete=complete_remote,
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ls(everywhere: bool, remote: str | None, as_json: bool) -> None:
    """List sessions: this worktree's first, then the other worktrees'."""
    if remote is not None:
        if everywhere:
            raise click.UsageError("--remote and --everywhere do not go together")
        from gitsess.cli import remote_cmds

        remote_cmds.list_remote_sessions(remote or None, as_json)
        return
    if everywhere:
        repos = sessions.list_everywhere()
        if as_json:
            print_json(
                [
                    {
                        "repo": repo.common_dir,
                        "error": repo.error,
                        "sessions": [_with_drift(i) for i in repo.sessions],
                    }
                    for repo in repos
                ]
            )
            return
        if not repos:
            click.echo("No sessions in any repository.")
        for repo in repos:
            click.echo(_bold(table.clean(str(repo.common_dir))))
            if repo.error:
                click.echo("  " + _styled(table.clean(repo.error), "red"))
            else:
                drift = _drift_counts(repo.sessions)
                table.echo(*_table(repo.sessions, drift, with_worktree=True))
                if any(drift.values()):
                    click.echo(_DRIFT_NOTE)
        return
    ctx = discover()
    # The table has no sizes: they cost a scan of each delta.
    infos = sessions.list_sessions(ctx, sizes=as_json)
    clash = clashes(ctx, infos)
    if as_json:
        print_json(ls_json(infos, clash))
        return
    if not infos:
        if ctx.worktree is None:
            click.echo(
                f"No sessions in {table.clean(str(ctx.common_dir))} yet. A session works on a"
                " worktree: run gitsess in one, or `gitsess new NAME --worktree` makes one."
            )
        else:
            click.echo(
                f"No sessions in {table.clean(str(ctx.common_dir))} yet. Create one: gitsess new"
            )
        return
    drift = _drift_counts(infos)
    here = [i for i in infos if i.here]
    others = [i for i in infos if not i.here]
    if here:
        click.echo(f"{_bold('This worktree')} {table.clean(str(here[0].session.worktree))}")
        table.echo(*_table(here, drift, with_worktree=False, clash=clash))
    if others:
        click.echo(_bold("Other worktrees"))
        table.echo(*_table(others, drift, with_worktree=True, clash=clash))
    if any(drift.values()):
        click.echo(_DRIFT_NOTE)
    if clash:
        click.echo(_CLASH_NOTE)
    if any(i.out_of_reach for i in infos):
        click.echo(_OUT_OF_REACH_NOTE)
    _say_interrupted(ctx, [i.session for i in infos])


def ls_json(
    infos: Sequence[SessionInfo], clash: Mapping[str, Sequence[str]]
) -> list[dict[str, object]]:
    """What `ls --json` (and the MCP tool `sessions`) gives."""
    return [
        {**_with_drift(i), "conflicts_with": list(clash.get(i.session.name, ()))} for i in infos
    ]


def show_json(
    info: SessionInfo,
    usage: inspection.Usage,
    drift: Sequence[Drift],
    commits: Sequence[OwnCommit],
) -> dict[str, object]:
    """What `show --json` (and the MCP tool `show`) gives."""
    return {
        **info_json(info),
        "usage": asdict(usage),
        "drift": [{"path": d.path, "time": d.time} for d in drift],
        "own_commits": None if info.out_of_reach else [asdict(c) for c in commits],
    }


_CLASH_NOTE = "x applying both would conflict: the paths are in `gitsess overlaps`"


def clashes(ctx: RepoContext, infos: Sequence[SessionInfo]) -> dict[str, list[str]]:
    """What each session would conflict with (sessions, or its branch), by the radar; not
    even loaded when nothing could conflict: no two sessions with changes share a branch,
    and no branch moved under one (`ls` stays quick for a single session's work)."""
    changing = [i for i in infos if i.changed_files or i.commits]
    branches = [i.session.branch for i in changing]
    if len(set(branches)) == len(branches) and not any(i.behind for i in changing):
        return {}
    from gitsess.services import overlaps

    return overlaps.conflicting(overlaps.overlaps(ctx))


def _bold(text: str) -> str:
    return click.style(text, bold=True) if table.colour() else text


def _styled(text: str, colour: str) -> str:
    return click.style(text, fg=colour) if table.colour() else text


def _say_interrupted(ctx: RepoContext, listed: Sequence[Session]) -> None:
    """Until the next command on it, the real worktree of an apply killed half-way shows only
    part of what it wrote: whoever looks is told."""
    for s in listed:
        if sessions.apply_interrupted(ctx, s):
            click.echo(
                f"gitsess: session {s.name}: an apply was interrupted and the real worktree may"
                " show part of it; any gitsess command on the session (or gitsess gc) completes"
                " it",
                err=True,
            )


_DRIFT_NOTE = (
    "! the real worktree changed paths that the session changed too (gitsess show NAME lists them)"
)


def _drift(info: SessionInfo) -> list[Drift]:
    # Drift of a path the session holds matters only where the session's file differs from
    # the real one now: a session that changed no file has none (and needs no reader).
    if info.damaged or not info.changed_files:
        return []
    from gitsess.services import inspection

    return inspection.drift(info.session, info.session_dir)


def _drifted(info: SessionInfo) -> list[str]:
    return [d.path for d in _drift(info)]


def _drift_counts(infos: Sequence[SessionInfo]) -> dict[str, int]:
    return {i.session.id: len(_drifted(i)) for i in infos}


def _with_drift(info: SessionInfo) -> dict[str, object]:
    return {**info_json(info), "drift": _drifted(info)}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# Inside a run the worktree's path shows the view: what compares with the real worktree and
# branch (changes, commits, behind) is unknown there, and said so rather than counted wrong.
OUT_OF_REACH = "?"
_OUT_OF_REACH_NOTE = (
    "? inside a session's run the real worktree and branch are out of reach: changes, commits "
    "and behind are not known here (run gitsess outside the session for them)"
)


def changes_text(info: SessionInfo) -> str:
    """CHANGES: "2 files, 1 commit", "none"; a count that cannot be read is left out."""
    if info.out_of_reach:
        return OUT_OF_REACH
    parts = []
    if info.changed_files:
        parts.append(_plural(info.changed_files, "file"))
    if info.commits:
        parts.append(_plural(info.commits, "commit"))
    return ", ".join(parts) or "none"


def branch_text(info: SessionInfo) -> str:
    """The branch, and how far the session is ahead of it (its own commits) and behind it
    (commits the branch gained since the session's base), as git's status prints them."""
    marks = []
    if info.commits:
        marks.append(f"↑{info.commits}")
    if info.behind:
        marks.append(f"↓{info.behind}")
    return branch_label(info.session) + (f" {' '.join(marks)}" if marks else "")


_STATE_STYLE = {"running": "green", "mounted": "cyan", "damaged": "red"}


def _table(
    infos: Sequence[SessionInfo],
    drift: Mapping[str, int],
    *,
    with_worktree: bool,
    clash: Mapping[str, Sequence[str]] | None = None,
) -> tuple[list[table.Column], list[list[table.Cell]]]:
    Col, Cell = table.Column, table.Cell
    columns = [
        Col("#", right=True),
        Col("NAME"),
        Col("ID"),
        Col("BRANCH", shrink=3, minimum=8),
        Col("STATE"),
        Col("CHANGES", shrink=4, minimum=8),
        Col("LAST USED"),
    ]
    if with_worktree:
        columns.append(Col("WORKTREE", shrink=2, minimum=12))
    columns.append(Col("TITLE", shrink=1, minimum=8))
    rows = []
    for info in infos:
        s = info.session
        name = s.name + ("" if s.state == "active" else f" ({s.state})")
        drifted = drift.get(s.id, 0)
        changes = changes_text(info) + (f", ! {drifted} drifted" if drifted else "")
        others = (clash or {}).get(s.name, ())
        changes += f", x conflicts with {', '.join(others)}" if others else ""
        row = [
            Cell(str(info.offset)),
            Cell(name, "bold"),
            Cell(s.id[:8]),
            Cell(branch_text(info)),
            Cell(info.status, _STATE_STYLE.get(info.status)),
            Cell(changes, "red" if others else "yellow" if drifted else None),
            Cell(ago(s.last_used_at), "dim"),
        ]
        if with_worktree:
            gone = "" if info.worktree_exists else f" {GONE}"
            row.append(Cell(str(s.worktree) + gone, None if info.worktree_exists else "red"))
        row.append(Cell(first_line(s.title)))
        rows.append(row)
    return columns, rows


@cli.command(cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """Show one session."""

    from gitsess.services import inspection

    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    ctx = discover()
    # The sizes are in `usage`; the session's own are for JSON.
    info = sessions.info(ctx, ref, sizes=as_json)
    usage = inspection.usage(ctx, info)
    drift = _drift(info)
    commits = inspection.own_commits(ctx, info.session) if info.commits else []
    if as_json:
        print_json(show_json(info, usage, drift, commits))
        return
    s = info.session
    rows = [
        ("name", s.name),
        ("id", s.id),
        ("title", first_line(s.title) or "-"),
        ("offset", str(info.offset)),
        ("lifecycle", s.state + (", read-only" if s.read_only else "")),
        ("worktree", str(s.worktree) + ("" if info.worktree_exists else f" {GONE}")),
        ("branch", s.branch or "(detached HEAD)"),
        ("base commit", short(s.base_commit)),
        ("made by gitsess", _made(s)),
        ("created", f"{s.created_at:%Y-%m-%d %H:%M:%S} UTC ({ago(s.created_at)})"),
        ("last used", f"{s.last_used_at:%Y-%m-%d %H:%M:%S} UTC ({ago(s.last_used_at)})"),
        ("state", info.status),
        ("changes", changes_text(info)),
        ("behind", _behind_text(info)),
        ("commits", OUT_OF_REACH if info.out_of_reach else _commits(info.commits)),
        *_git_rows(info),
        ("delta size", f"{_size(usage.delta_bytes)} ({_size(usage.live_bytes)} in use)"),
        *([("of which", _kinds(usage.bytes_by_kind))] if usage.bytes_by_kind is not None else []),
        ("git objects", _size(usage.objects_bytes)),
        ("runs", _runs(usage)),
        ("last activity", _when(usage.last_activity)),
        ("session dir", str(info.session_dir)),
    ]
    # Key and value on a line, nothing after the value: a grid pads every line to its width.
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        click.echo(f"{_bold(f'{key:<{width}}')}  {table.clean(value)}")
    for c in commits:
        click.echo(f"  {c.commit[:10]} {table.clean(c.subject)}")
    if info.out_of_reach:
        click.echo(_OUT_OF_REACH_NOTE)
    _say_interrupted(ctx, [s])
    if drift:
        click.echo(
            f"{_styled('warning:', 'yellow')} the real worktree changed {len(drift)} path(s)"
            " that this session changed too; applying may conflict:"
        )
        for d in drift:
            click.echo(f"  {table.clean(d.path)} ({ago(d.time)})")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    unit = "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def _kinds(b: inspection.Bytes) -> str:
    return (
        f"files {_size(b.files_bytes)}, checkpoints {_size(b.checkpoints_bytes)},"
        f" log {_size(b.log_bytes)}, free {_size(b.free_bytes)}"
    )


def _runs(usage: inspection.Usage) -> str:
    if not usage.runs:
        return "none"
    running = f", {usage.running} running" if usage.running else ""
    return f"{usage.runs}{running}, {usage.run_seconds:.1f} s in all"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC ({ago(moment)})"


def _behind_text(info: SessionInfo) -> str:
    if info.out_of_reach:
        return OUT_OF_REACH
    return "-" if info.behind is None else _plural(info.behind, "commit")


def _commits(count: int | None) -> str:
    if count is None:
        return "-"
    if not count:
        return "0"
    return f"{count} of the session's own, ahead of the branch (apply --commit promotes them)"


def _git_rows(info: SessionInfo) -> list[tuple[str, str]]:
    rows = []
    if info.head_branch:
        rows.append(("git branch", f"{info.head_branch.removeprefix('refs/heads/')}, not the "
                     "session's branch (apply --commit needs --branch)"))  # fmt: skip
    if info.below_base:
        rows.append(("reset", f"its HEAD is {info.below_base} commit(s) below its base "
                     "(apply --commit commits the files as the view has them)"))  # fmt: skip
    return rows


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
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option(
    "--force", is_flag=True, help="Also remove a gitsess-made worktree and branch holding work."
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def rm(
    session: str | None,
    offsets: tuple[str, ...],
    session_option: str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Remove a session, and the worktree and branch gitsess made for it when nothing is lost."""
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    removal = sessions.remove(discover(), ref, force=force)
    s = removal.session
    if as_json:
        fields = removal._asdict()
        del fields["session"]
        print_json({**asdict(s), **fields})
        return
    console().print(f"Removed session [bold]{escape(s.name)}[/] ({s.id[:8]})")
    if removal.removed_worktree:
        console().print(f"Removed worktree {escape(str(s.worktree))}")
    if removal.removed_branch:
        console().print(f"Deleted branch {escape(s.branch or '')}")
    for note in removal.notes:
        click.echo(f"gitsess: {note}", err=True)


@cli.command(cls=SessionCommand)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] NEW_NAME", shell_complete=complete_session_first
)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def rename(
    args: tuple[str, ...], offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """Rename a session (its worktree and branch keep their names)."""
    ref, (new_name,) = session_ref(args, 1, offsets, session_option)
    session = sessions.rename(discover(), ref, new_name)
    if as_json:
        print_json(asdict(session))
        return
    console().print(f"Session {session.id[:8]} is now named [bold]{escape(session.name)}[/]")


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION] TEXT", shell_complete=complete_session_first)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def title(
    args: tuple[str, ...], offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """Set a session's title ("" clears it)."""
    ref, (text,) = session_ref(args, 1, offsets, session_option)
    session = sessions.set_title(discover(), ref, text)
    if as_json:
        print_json(asdict(session))
        return
    console().print(
        f"Session [bold]{escape(session.name)}[/]: {escape(session.title or '(no title)')}"
    )
