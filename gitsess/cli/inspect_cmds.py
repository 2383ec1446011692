"""Commands that look into a session from outside: log, fs, kv, watch."""

from __future__ import annotations

import json
import stat as st
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

import click
from rich.cells import cell_len, set_cell_size
from rich.console import Group as Stack
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gitsess.cli.base import (
    SessionCommand,
    SessionGroup,
    ago,
    complete_session,
    console,
    escape,
    group_ref,
    group_session,
    print_json,
    session_of,
    session_ref,
    takes_session,
)
from gitsess.cli.group import cli
from gitsess.cli.table import clean
from gitsess.errors import GitsessError
from gitsess.services import gitfold, inspection, inspection_fs, test_logs, timeline
from gitsess.services.feed import Change, Feed
from gitsess.services.gitfold import GitActivity
from gitsess.services.timeline import Drift, Event


def _emit(data: object) -> None:
    """One JSON line, flushed: followers read it as it comes."""
    click.echo(json.dumps(data, ensure_ascii=False))


# ---------------------------------------------------------------- log


def event_json(e: Event) -> dict[str, object]:
    return {
        "event": e.id,
        "time": e.time.isoformat(),
        "time_ns": e.time_ns,
        "op": e.op,
        "path": e.path,
        "target": e.target,
        "bytes": e.bytes,
        "pid": e.pid,
        "process": e.process,
        "cmdline": e.cmdline,
        "role": e.role,
        "run": e.run_id,
    }


def change_json(c: Change) -> dict[str, object]:
    if isinstance(c, Drift):
        return {"time": c.time.isoformat(), "time_ns": c.time_ns, "op": "drift", "path": c.path}
    return event_json(c)


def _what(e: Event) -> str:
    """The path, and where a rename or link went (or what a symlink points at); plain text."""
    if e.target is None:
        return e.path
    return f"{e.path} {'->' if e.op == 'symlink' else '→'} {e.target}"


def _who(e: Event) -> str:
    who = f"{e.process or '?'} ({e.pid})" if e.pid else "-"
    return who + (f" [{e.role}]" if e.role else "")


def _offset(seconds: float) -> str:
    if seconds < 60:
        return f"+{seconds:.3f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"+{minutes}m{int(seconds % 60):02d}s"
    return f"+{minutes // 60}h{minutes % 60:02d}m"


def _seconds(start: datetime, end: datetime) -> str:
    s = (end - start).total_seconds()
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {int(s % 60)} s"


def _header(group: timeline.Group) -> tuple[str, datetime]:
    """The group's heading and the moment its event times are counted from."""
    count = f"{len(group.events)} change{'' if len(group.events) == 1 else 's'}"
    trimmed = group.trimmed
    if trimmed is not None:
        count += f" · {_trimmed(trimmed.events, trimmed.ops, trimmed.bytes)}"
    run = group.run
    if run is None:
        first = group.events[0].time_ns if group.events else trimmed.first_ns if trimmed else 0
        start = datetime.fromtimestamp(first / 1e9, UTC)
        return f"[bold]outside any run[/] · {ago(start)} · {count}", start
    parts = [f"[bold]run {run.id}[/]", escape(" ".join(run.command))]
    if run.role:
        parts.append(f"role {escape(run.role)}")
    parts.append(f"started {ago(run.started_at)}")
    if run.ended_at is None:
        parts.append("[yellow]running[/]")
    else:
        code = "exit 0" if run.exit_code == 0 else f"[red]exit {run.exit_code}[/]"
        parts += [_seconds(run.started_at, run.ended_at), code]
    parts.append(count)
    return " · ".join(parts), run.started_at


def _trimmed(events: int, ops: dict[str, int], size: int) -> str:
    """The events of a run the log's retention dropped, as the run's summary keeps them."""
    counts = ", ".join(f"{op} {n}" for op, n in sorted(ops.items(), key=lambda i: -i[1]))
    written = f", {size} bytes written" if size else ""
    return f"{events} earlier no longer kept ({counts}{written})"


def _test_output(kept: test_logs.Tail | None) -> None:
    """Under a gated apply's failed test: the end of its output."""
    if kept is None:
        return
    more = f"its end; all of it in {kept.path}" if kept.cut else f"kept in {kept.path}"
    console().print(f"  test output ({escape(more)}):", soft_wrap=True)
    for line in kept.text.splitlines():
        console().print(Text("  | " + line), soft_wrap=True)


def _row(item: Event | GitActivity, start: datetime) -> tuple[str, str, str, str, str, str]:
    e = item.first if isinstance(item, GitActivity) else item
    when = _offset(max(0.0, (e.time - start).total_seconds()))
    if isinstance(item, GitActivity):
        return when, "git", _git_what(item), "", _who(e), e.cmdline or ""
    size = "" if e.bytes is None else str(e.bytes)
    return when, e.op, _what(e), size, _who(e), e.cmdline or ""


def _git_what(item: GitActivity) -> str:
    more = " more" if item.more else ""
    return f"{item.command}: {item.files}{more} file{'' if item.files == 1 else 's'} in .git"


def _add_folded(recent: deque[Change | GitActivity], item: Change | GitActivity) -> None:
    """A live watch's line for a git command counts what it did in later batches too."""
    if isinstance(item, GitActivity) and item.more:
        for n, old in enumerate(recent):
            if isinstance(old, GitActivity) and old.key == item.key:
                recent[n] = GitActivity(old.first, old.files + item.files, old.more)
                return
    recent.append(item)


def _events_text(events: Sequence[Event | GitActivity], start: datetime) -> Text:
    """The group's events in aligned columns.

    Not a rich Table: one renders 10,000 rows in ~10 s, this in a fraction of one.
    """
    header = ("WHEN", "OP", "PATH", "BYTES", "PROCESS", "COMMAND")
    rows = [_row(e, start) for e in events]
    widths = [max(cell_len(r[i]) for r in [header, *rows]) for i in range(5)]
    room = max(20, console().width - sum(widths) - 2 * len(widths))
    text = Text(no_wrap=True, overflow="ellipsis")
    for n, row in enumerate([header, *rows]):
        when, op, what, size, who, command = row
        cells = [
            (" " * (widths[0] - cell_len(when)) + when, "bold" if n == 0 else "dim"),
            (set_cell_size(op, widths[1]), "bold" if n == 0 else "cyan"),
            (set_cell_size(what, widths[2]), "bold" if n == 0 else ""),
            (" " * (widths[3] - cell_len(size)) + size, "bold" if n == 0 else ""),
            (set_cell_size(who, widths[4]), "bold" if n == 0 else ""),
        ]
        for cell, style in cells:
            text.append(cell, style)
            text.append("  ")
        clipped = command if cell_len(command) <= room else set_cell_size(command, room - 1) + "…"
        text.append(clipped.rstrip() + "\n", "bold" if n == 0 else "dim")
    return text


def _line(c: Change | GitActivity) -> str:
    """One change as a line, for followers and piped watches."""
    clock = c.time.astimezone().strftime("%H:%M:%S.%f")[:-3]
    if isinstance(c, GitActivity):
        run = "" if c.first.run_id is None else f"  run {c.first.run_id}"
        return f"{clock}  git  {escape(_git_what(c))}  {escape(_who(c.first))}{run}"
    if isinstance(c, Drift):
        return f"{clock}  [yellow]drift[/]  {escape(c.path)}  (the real worktree changed it too)"
    size = "" if c.bytes is None else f"  {c.bytes} B"
    run = "" if c.run_id is None else f"  run {c.run_id}"
    return f"{clock}  {c.op}  {escape(_what(c))}{size}  {escape(_who(c))}{run}"


@cli.command(cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option(
    "--since",
    metavar="T",
    help="Only since T: a duration ago (30s, 10m, 2h, 1d, 1w) or an ISO date/time.",
)
@click.option(
    "--path",
    "path_glob",
    metavar="GLOB",
    help="Only these paths (from the worktree root; a directory includes what is below it).",
)
@click.option("--pid", type=click.IntRange(0, (1 << 63) - 1), help="Only this process id.")
@click.option(
    "--op",
    "ops",
    multiple=True,
    metavar="OP",
    help="Only this operation (repeatable): create, write, rename, unlink, mkdir, ...",
)
@click.option("--run", "run_id", type=int, metavar="ID", help="Only this run.")
@click.option(
    "--git",
    "with_git",
    is_flag=True,
    help="Also git's own files below .git, one by one (else one line per git command).",
)
@click.option(
    "--exclude", multiple=True, metavar="GLOB", help="Leave out these paths (repeatable)."
)
@click.option(
    "--commits", is_flag=True, help="The session's own commits (hash and subject) instead."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change and line.")
@click.option("--follow", "-f", is_flag=True, help="Then print changes as they happen.")
def log(
    session: str | None,
    offsets: tuple[str, ...],
    session_option: str | None,
    since: str | None,
    path_glob: str | None,
    pid: int | None,
    ops: tuple[str, ...],
    run_id: int | None,
    with_git: bool,
    exclude: tuple[str, ...],
    commits: bool,
    as_json: bool,
    follow: bool,
) -> None:
    """What happened in a session: its file changes, grouped by run.

    git's own files below .git are shown as one line per git command (--git lists them, and
    --json has them only with --git); --commits lists the session's own commits instead.
    """
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    if commits:
        _log_commits(ref, as_json, follow=follow)
        return
    try:
        flt = timeline.make_filter(since=since, path=path_glob, pid=pid, ops=ops, run_id=run_id)
    except GitsessError as bad:
        raise click.UsageError(str(bad)) from bad
    ctx, found = session_of(ref)
    past = timeline.timeline(ctx, found, flt)

    def listed(e: Event) -> bool:
        return gitfold.shown(e.path, git=with_git, exclude=exclude)

    if as_json:
        events = sorted((e for g in past.groups for e in g.events if listed(e)), key=lambda e: e.id)
        if events:
            click.echo("\n".join(json.dumps(event_json(e), ensure_ascii=False) for e in events))
    elif past.groups:
        for n, group in enumerate(past.groups):
            heading, start = _header(group)
            console().print(("\n" if n else "") + heading)
            kept = [e for e in group.events if not gitfold.excluded(e.path, exclude)]
            items = list(kept) if with_git else gitfold.fold(kept)
            if items:
                console().print(_events_text(items, start), end="")
            _test_output(test_logs.failed_tail(ctx, found.id, group.run))
    elif not follow:
        console().print(
            f"Nothing matches in session {escape(found.name)}."
            if flt != timeline.Filter()
            else f"No activity in session {escape(found.name)} yet."
        )
    if not follow:
        return
    folder = gitfold.Folder()
    try:
        for batch in timeline.follow(ctx, found, flt, after_id=past.last_id):
            if as_json:
                for e in filter(listed, batch):
                    _emit(event_json(e))
                continue
            kept = [e for e in batch if not gitfold.excluded(e.path, exclude)]
            for item in kept if with_git else folder.fold(kept):
                console().print(_line(item))
    except KeyboardInterrupt:
        return


def _log_commits(ref: str | None, as_json: bool, *, follow: bool) -> None:
    """`log --commits`: the commits made in the session that its branch lacks, oldest first."""
    if follow:
        raise click.UsageError("--commits and --follow do not go together")
    ctx, found = session_of(ref)
    own = inspection.own_commits(ctx, found)
    if not own and not as_json:
        click.echo(f"Session {clean(found.name)} has no commits of its own.")
    for c in own:
        if as_json:
            _emit({"commit": c.commit, "subject": c.subject})
        else:
            click.echo(f"{c.commit[:10]} {clean(c.subject)}")


# ---------------------------------------------------------------- fs


@cli.group(cls=SessionGroup, subcommand_metavar="[SESSION] ls|cat|stat [ARGS]...")
@group_session
@click.pass_context
def fs(ctx: click.Context, session_arg: str | None, session_option: str | None) -> None:
    """Read a session's files without mounting it: fs [SESSION] ls|cat|stat."""
    ref, _ = session_ref([session_arg] if session_arg else [], 0, [], session_option)
    ctx.obj = ref


def _mode(e: inspection_fs.FsEntry) -> str:
    return st.filemode(e.mode)


def _mtime(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).astimezone().strftime("%Y-%m-%d %H:%M")


def _fs_json(e: inspection_fs.FsEntry) -> dict[str, object]:
    return {
        "path": e.path,
        "name": e.name,
        "kind": e.kind,
        "mode": _mode(e),
        "size": e.size,
        "mtime_ns": e.mtime_ns,
        "changed": e.changed,
        "link": e.link,
    }


@fs.command("ls")
@click.argument("path", default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def fs_ls(path: str, as_json: bool) -> None:
    """List a directory of the session's view (* marks what the session changed)."""
    ctx, found = session_of(group_ref())
    entries = inspection_fs.ls(ctx, found, path)
    if as_json:
        print_json([_fs_json(e) for e in entries])
        return
    table = Table(box=None, pad_edge=False, show_header=False, padding=(0, 2, 0, 0))
    for justify in ("left", "right", "left", "left"):
        table.add_column(no_wrap=True, justify=justify)
    for e in entries:
        name = escape(e.name if e.kind != "dir" else e.name + "/")
        if e.link is not None:
            name += f" -> {escape(e.link)}"
        if e.changed:
            name = f"[yellow]{name}[/] *"
        table.add_row(_mode(e), str(e.size), _mtime(e.mtime_ns), name)
    console().print(table)


@fs.command("cat")
@click.argument("path")
@click.option("--at", "at", type=int, metavar="CHECKPOINT", help="As it was at a checkpoint.")
def fs_cat(path: str, at: int | None) -> None:
    """Print a file of the session's view, as bytes."""
    ctx, found = session_of(group_ref())
    data = inspection_fs.cat(ctx, found, path, at)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@fs.command("stat")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def fs_stat(path: str, as_json: bool) -> None:
    """Describe one path of the session's view."""
    ctx, found = session_of(group_ref())
    info = inspection_fs.stat(ctx, found, path)
    e = info.entry
    origin = info.copied_from
    if as_json:
        print_json(
            {
                **_fs_json(e),
                "copied_from": None
                if origin is None
                else {
                    "size": origin.size,
                    "mode": st.filemode(origin.mode),
                    "mtime_ns": origin.mtime_ns,
                },
            }
        )
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows = [
        ("path", e.path or "."),
        ("kind", e.kind + ("" if e.link is None else f" -> {e.link}")),
        ("mode", f"{_mode(e)} ({st.S_IMODE(e.mode):04o})"),
        ("size", str(e.size)),
        ("modified", _mtime(e.mtime_ns)),
        ("in the session", "changed" if e.changed else "as in the worktree"),
    ]
    if origin is not None:
        rows.append(
            (
                "copied from",
                f"the worktree's {st.filemode(origin.mode)} {origin.size} bytes"
                f" of {_mtime(origin.mtime_ns)}",
            )
        )
    for key, value in rows:
        grid.add_row(key, escape(value))
    console().print(grid)


# ---------------------------------------------------------------- watch


def _watch_view(name: str, recent: Iterable[Change | GitActivity], total: int, paths: int) -> Stack:
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 2, 0, 0))
    for column, width in (("TIME", None), ("OP", None), ("PATH", 3), ("PROCESS", None)):
        table.add_column(column, no_wrap=width is None, overflow="fold", ratio=width)
    for c in recent:
        clock = c.time.astimezone().strftime("%H:%M:%S.%f")[:-3]
        if isinstance(c, GitActivity):
            table.add_row(clock, "git", escape(_git_what(c)), escape(_who(c.first)))
        elif isinstance(c, Drift):
            table.add_row(clock, "[yellow]drift[/]", escape(c.path), "(the real worktree)")
        else:
            table.add_row(clock, c.op, escape(_what(c)), escape(_who(c)))
    heading = Text.from_markup(
        f"Watching session [bold]{escape(name)}[/] · {total} change{'' if total == 1 else 's'}"
        f" to {paths} path{'' if paths == 1 else 's'} · ctrl-c stops"
    )
    return Stack(heading, table)


@cli.command(cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option("--git", "with_git", is_flag=True, help="Also git's own files below .git.")
@click.option(
    "--exclude", multiple=True, metavar="GLOB", help="Leave out these paths (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per change and line.")
def watch(
    session: str | None,
    offsets: tuple[str, ...],
    session_option: str | None,
    with_git: bool,
    exclude: tuple[str, ...],
    as_json: bool,
) -> None:
    """Watch a session's changes live, from any terminal, without joining it."""
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    ctx, found = session_of(ref)
    feed = Feed(ctx, found)
    live = not as_json and console().is_terminal
    if not live:
        # Said once the starting point is taken: nothing committed after this line is missed.
        click.echo(f"gitsess: watching session {found.name} (ctrl-c stops)", err=True)

    folder = gitfold.Folder()

    def listed(batches: Iterable[list[Change]]) -> Iterator[list[Change | GitActivity]]:
        for batch in batches:
            # JSON has git's own files only with --git, as in `log`.
            folded = not with_git and not as_json
            kept: list[Change | GitActivity] = (
                folder.fold(c for c in batch if not gitfold.excluded(c.path, exclude))
                if folded
                else [c for c in batch if gitfold.shown(c.path, git=with_git, exclude=exclude)]
            )
            if kept:
                yield kept

    try:
        if not live:
            for batch in listed(feed):
                for c in batch:
                    if isinstance(c, GitActivity) or not as_json:
                        console().print(_line(c))
                    else:
                        _emit(change_json(c))
            return
        recent: deque[Change | GitActivity] = deque(maxlen=max(5, console().height - 3))
        total = 0
        paths: set[str] = set()
        with Live(
            _watch_view(found.name, recent, total, 0), console=console(), auto_refresh=False
        ) as screen:
            for batch in listed(feed):
                for c in batch:
                    _add_folded(recent, c)
                    if isinstance(c, GitActivity):
                        total += c.files
                        continue
                    total += 1
                    paths.add(c.path)
                    if isinstance(c, Event) and c.target is not None and c.op != "symlink":
                        paths.add(c.target)
                screen.update(_watch_view(found.name, recent, total, len(paths)), refresh=True)
    except KeyboardInterrupt:
        return
    finally:
        feed.close()
