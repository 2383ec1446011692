"""Commands that share sessions through git remotes: push, pull (and `ls --remote`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn
from rich.progress import Progress as Bars
from rich.table import Table

from gitsess.cli.base import (
    SessionCommand,
    ago,
    complete_remote,
    complete_session_or_remote,
    console,
    escape,
    first_line,
    print_json,
    session_ref,
    short,
    takes_session,
)
from gitsess.cli.group import cli
from gitsess.errors import GitsessError
from gitsess.services import remote, sessions
from gitsess.services.remote import Progress
from gitsess.services.sessions import RepoContext, Session, discover


class TransferBars:
    """A transfer's progress as a bar (objects, with the bytes so far)."""

    def __init__(self, bars: Bars) -> None:
        self.bars = bars
        self.task: TaskID | None = None
        self.what = ""

    def received(self, objects: int, total: int, nbytes: int) -> None:
        self._show("receiving", objects, total, nbytes)

    def sent(self, objects: int, total: int, nbytes: int) -> None:
        self._show("sending", objects, total, nbytes)

    def _show(self, what: str, done: int, total: int, nbytes: int) -> None:
        if self.task is None or what != self.what:
            self.task, self.what = self.bars.add_task(what, total=total), what
        description = f"{what} objects, {_bytes(nbytes)}"
        self.bars.update(self.task, completed=done, total=total, description=description)


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def bars(console: Console) -> Bars:
    return Bars(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
    )


@contextmanager
def transfer_progress() -> Iterator[Progress | None]:
    """Bars on stderr while objects move, when stderr is a terminal (logs get no bars)."""
    if not sys.stderr.isatty():
        yield None
        return
    with bars(Console(stderr=True)) as shown:
        yield TransferBars(shown)


def _notes(notes: tuple[str, ...]) -> None:
    for note in notes:
        click.echo(f"gitsess: {note}", err=True)


@cli.command(cls=SessionCommand)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] [REMOTE]", shell_complete=complete_session_or_remote
)
@takes_session
@click.option("--with-kv", is_flag=True, help="Send the session's key-value store along.")
@click.option(
    "--force",
    is_flag=True,
    help="Push over work on the remote never pulled here (kept in history).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def push(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    with_kv: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Publish a session on a git remote (default: the branch's remote, else origin), as a
    commit under refs/gitsess/sessions/NAME. Agent homes and credentials never go; the
    key-value store only with --with-kv."""
    ctx = discover()
    ref, target = _session_and_remote(ctx, args, offsets, session_option)
    with transfer_progress() as progress:
        done = remote.push(ctx, ref, target, with_kv=with_kv, force=force, progress=progress)
    _notes(done.notes)
    if as_json:
        print_json(_session_json(done.session, asdict(done)))
        return
    s = done.session
    if not done.pushed:
        console().print(
            f"{escape(done.remote)} already has session [bold]{escape(s.name)}[/] as it is here "
            f"({short(done.commit)})"
        )
        return
    kv_note = ", with its key-value store" if done.kv else ""
    console().print(
        f"Pushed session [bold]{escape(s.name)}[/] to {escape(done.remote)} as {done.ref} "
        f"({short(done.commit)}, {done.files} changed file(s){kv_note})"
    )
    if done.forced:
        click.echo(
            f"gitsess: {done.remote} had work never pulled here; it stays in the session "
            f"commit's history (git log {done.commit[:10]})",
            err=True,
        )


def _session_and_remote(
    ctx: RepoContext,
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    option: str | None,
) -> tuple[str | None, str | None]:
    """`[SESSION] [REMOTE]`: with one word and no other way of naming the session, a word that
    names a remote (or reads as a URL) is the remote, else the session; both is ambiguous."""
    if len(args) > 2:
        raise click.UsageError(f"expected at most a session and a remote, got {len(args)} words")
    if len(args) == 2:
        ref, (target,) = session_ref(args, 1, offsets, option)
        return ref, target
    if not args:
        return session_ref((), 0, offsets, option)[0], None
    word = args[0]
    if offsets or option is not None:
        return session_ref((), 0, offsets, option)[0], word
    if not remote.is_remote(ctx, word):
        return word, None
    try:
        sessions.resolve(ctx, word)
    except GitsessError:
        return None, word
    raise click.UsageError(
        f"{word!r} names both a session and a remote: give both, or the session with -s"
    )


@cli.command()
@click.argument("name")
@click.argument("target", metavar="[REMOTE]", required=False, shell_complete=complete_remote)
@click.option(
    "--worktree",
    is_flag=True,
    help="Create a worktree for the session's branch when none has it checked out.",
)
@click.option("--force", is_flag=True, help="Take the remote's state even if the session diverged.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pull(name: str, target: str | None, worktree: bool, force: bool, as_json: bool) -> None:
    """Bring session NAME from a git remote (default: origin): a new session on a worktree of
    its branch, or a fast-forward of the one here. A session that diverged is refused unless
    --force (which archives the local work first)."""
    ctx = discover()
    with transfer_progress() as progress:
        done = remote.pull(ctx, name, target, worktree=worktree, force=force, progress=progress)
    _notes(done.notes)
    if as_json:
        print_json(_session_json(done.session, asdict(done)))
        return
    s = done.session
    what = {
        "created": f"new session on {s.branch or 'a detached HEAD'} in {s.worktree}",
        "fast-forward": "fast-forwarded",
        "replaced": "replaced by theirs",
        "up-to-date": "already up to date",
        "same": "already the same",
    }[done.outcome]
    files = f", {done.files} changed file(s)" if done.outcome in ("created", "fast-forward",
                                                                   "replaced") else ""  # fmt: skip
    keys = f", {done.kv} key(s)" if done.kv else ""
    console().print(
        f"Session [bold]{escape(s.name)}[/] from {escape(done.remote)} "
        f"({short(done.commit)}): {escape(what)}{files}{keys}"
    )
    if done.archive:
        click.echo(
            f"gitsess: the local work was archived as {done.archive}; `gitsess restore "
            f"{done.archive.rpartition('/')[2]} --as NEW` brings it back",
            err=True,
        )


def _session_json(session: Session, fields: dict[str, object]) -> dict[str, object]:
    """A push or pull outcome in the JSON vocabulary (docs/json.md): the session as `name` and
    `id`, its count of changed files as `changed_files`."""
    del fields["session"]
    return {"name": session.name, "id": session.id, **_renamed(fields)}


def _published_json(fields: dict[str, object]) -> dict[str, object]:
    fields = _renamed(fields)
    fields["id"] = fields.pop("session_id")
    return fields


_RENAMED = {"files": "changed_files", "base": "base_commit"}


def _renamed(fields: dict[str, object]) -> dict[str, object]:
    return {_RENAMED.get(k, k): v for k, v in fields.items()}


def list_remote_sessions(target: str | None, as_json: bool) -> None:
    """`ls --remote [REMOTE]`."""
    with transfer_progress() as progress:
        label, found = remote.list_remote(discover(), target, progress=progress)
    if as_json:
        print_json(
            [
                {
                    **_published_json(asdict(r.published)),
                    "name": r.name,
                    "claims": r.claims,
                    "changed_files": r.files,
                    "sync": r.here,
                    "remote": label,
                }
                for r in found
            ]
        )
        return
    if not found:
        console().print(f"{escape(label)} carries no sessions.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "FILES", "PUSHED", "BY", "BRANCH", "BASE", "COMMIT", "HERE", "TITLE"):
        table.add_column(column, no_wrap=column != "TITLE")
    for r in found:
        p = r.published
        claims = f" (its commit says {p.name!r})" if r.claims is not None else ""
        table.add_row(
            escape(r.name + claims),
            str(r.files),
            ago(p.pushed_at),
            escape(p.author),
            escape(p.branch or "-"),
            short(p.base),
            short(p.commit),
            r.here,
            escape(first_line(p.title)),
        )
    console().print(table)
