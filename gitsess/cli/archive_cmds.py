"""Sessions made from others: `fork` copies a session, `restore` brings an archived one back
(`archives` lists them)."""

from __future__ import annotations

from dataclasses import asdict

import click

from gitsess.cli.base import (
    SessionCommand,
    ago,
    complete_archive,
    complete_session_first,
    console,
    echo_notes,
    escape,
    print_json,
    session_ref,
    short,
    takes_session,
)
from gitsess.cli.group import cli
from gitsess.services import sessions
from gitsess.services.sessions import discover


@cli.command(cls=SessionCommand)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] NEW_NAME", shell_complete=complete_session_first
)
@takes_session
@click.option(
    "--at",
    "at",
    type=int,
    metavar="CHECKPOINT",
    help="Start from the session as it was at this checkpoint (`gitsess checkpoints`).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new session as JSON.")
def fork(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    at: int | None,
    as_json: bool,
) -> None:
    """A new session NEW_NAME with a copy of a session's changes, on the same worktree."""
    from gitsess.services import fork as forking

    ref, (new_name,) = session_ref(args, 1, offsets, session_option)
    ctx = discover()
    source = sessions.resolve(ctx, ref)
    made = forking.fork(ctx, source, new_name, at=at)
    if as_json:
        print_json(asdict(made))
        return
    console().print(
        f"Forked session [bold]{escape(source.name)}[/] into [bold]{escape(made.name)}[/] "
        f"({made.id[:8]})"
    )


# The archive's fields in the JSON vocabulary (docs/json.md).
_ARCHIVE_KEYS = {"base": "base_commit", "session_id": "id"}


@cli.command("archives")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def archives_command(as_json: bool) -> None:
    """List archived sessions (`rm` archives unapplied changes; `restore` brings them back)."""
    from rich.table import Table

    from gitsess.services import archives

    found = archives.archives(discover())
    if as_json:
        print_json(
            [
                {
                    **{_ARCHIVE_KEYS.get(k, k): v for k, v in asdict(a.info).items()},
                    "changed_files": a.files,
                    "restore": a.info.ref_name,
                }
                for a in found
            ]
        )
        return
    if not found:
        console().print("No archived sessions.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "FILES", "ARCHIVED", "BRANCH", "BASE", "COMMIT", "TITLE"):
        table.add_column(column, no_wrap=column != "TITLE")
    for a in found:
        i = a.info
        table.add_row(
            escape(i.ref_name),
            str(a.files),
            ago(i.archived_at),
            escape(i.branch or "-"),
            short(i.base),
            short(i.commit),
            escape(i.title),
        )
    console().print(table)


@cli.command()
@click.argument("name", shell_complete=complete_archive)
@click.option("--as", "new_name", metavar="NEW_NAME", help="Name the restored session this.")
@click.option("--json", "as_json", is_flag=True, help="Print the session as JSON.")
def restore(name: str, new_name: str | None, as_json: bool) -> None:
    """Bring back a session archived as NAME (see `gitsess archives`)."""
    from gitsess.services import archives

    done = archives.restore(discover(), name, new_name)
    echo_notes(done.notes)
    if as_json:
        print_json(asdict(done.session))
        return
    s = done.session
    console().print(
        f"Restored session [bold]{escape(s.name)}[/] ({s.id[:8]}): {done.files} path(s) on "
        f"{escape(str(s.worktree))}"
    )
