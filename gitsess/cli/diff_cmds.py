"""`gitsess diff`: a session's changes as a patch, a stat or names, coloured on a terminal."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import asdict

import click

from gitsess.cli.base import (
    complete_session_first,
    echo_notes,
    print_json,
    takes_session,
    write_bytes,
)
from gitsess.cli.group import cli
from gitsess.cli.pathspec_args import (
    PATHSPEC_HELP,
    PathspecCommand,
    target,
)
from gitsess.services import apply as applying
from gitsess.services.apply import Change
from gitsess.services.sessions import RepoContext, Session, discover

_BOLD, _RED, _GREEN, _CYAN, _RESET = b"\x1b[1m", b"\x1b[31m", b"\x1b[32m", b"\x1b[36m", b"\x1b[m"
_HUNK = re.compile(rb"^(@@ [^@]* @@)(.*)$", re.DOTALL)


def colour_patch(patch: bytes) -> bytes:
    """Colour a patch as `git diff --color` does: headers bold, hunk ranges cyan, removed lines
    red, added lines green. Inside a hunk a line starting `---` is a removed line, not a
    header."""
    out: list[bytes] = []
    in_hunk = False
    for line in patch.splitlines(keepends=True):
        body, eol = (line[:-1], b"\n") if line.endswith(b"\n") else (line, b"")
        if body.startswith(b"diff --git "):
            in_hunk = False
        hunk = _HUNK.match(body)
        if hunk is not None:
            in_hunk = True
            out.append(_CYAN + hunk.group(1) + _RESET + hunk.group(2) + eol)
        elif in_hunk and body.startswith(b"+"):
            out.append(_GREEN + body + _RESET + eol)
        elif in_hunk and body.startswith(b"-"):
            out.append(_RED + body + _RESET + eol)
        elif in_hunk:
            out.append(line)
        else:
            out.append(_BOLD + body + _RESET + eol)
    return b"".join(out)


@cli.command(cls=PathspecCommand, epilog=PATHSPEC_HELP)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] [--] [PATHSPEC...]", shell_complete=complete_session_first
)
@takes_session
@click.option("--stat", "show_stat", is_flag=True, help="Files changed and lines added/removed.")
@click.option("--name-status", is_flag=True, help="Status letter and path of each file.")
@click.option("--name-only", is_flag=True, help="Paths only.")
@click.option(
    "-z",
    "nul",
    is_flag=True,
    help="With --name-only/--name-status: fields ended by NULs, names as they are (unquoted).",
)
@click.option("--binary", is_flag=True, help="Binary files as patches `git apply` takes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (patch text included).")
@click.option("-M", "--find-renames", is_flag=True, help="Show renames as renames.")
@click.option("--ignored", is_flag=True, help="Include paths .gitignore ignores.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour the patch (auto: on a terminal, unless NO_COLOR is set).",
)
@click.option("--from", "from_cp", type=int, metavar="CP", help="From a checkpoint instead.")
@click.option("--to", "to_cp", type=int, metavar="CP", help="With --from: to this checkpoint.")
def diff(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    show_stat: bool,
    name_status: bool,
    name_only: bool,
    nul: bool,
    binary: bool,
    as_json: bool,
    find_renames: bool,
    ignored: bool,
    color: str,
    from_cp: int | None,
    to_cp: int | None,
) -> None:
    """Show what a session changed against its real worktree, content compared."""
    if sum((show_stat, name_status, name_only, as_json)) > 1:
        raise click.UsageError("give one of --stat, --name-status, --name-only, --json")
    if nul and not (name_status or name_only):
        raise click.UsageError("-z goes with --name-only or --name-status")
    ctx = discover()
    handle, specs = target(ctx, args, offsets, session_option)
    session = handle.row
    if from_cp is not None or to_cp is not None:
        names = name_status or name_only
        _diff_checkpoints(ctx, session, specs, from_cp, to_cp, names, nul, as_json)
        return
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else 80
    result, notes = applying.diff(
        ctx,
        handle,
        specs,
        include_ignored=ignored,
        binary=binary,
        find_renames=find_renames,
        stat_width=width,
    )
    echo_notes(notes)
    warn_drift(ctx, session)
    if as_json:
        print_json(result.to_json())
    elif show_stat:
        click.echo(result.stat, nl=False)
    elif nul:
        _write_records(result.name_records(with_status=name_status))
    elif name_status or name_only:
        for line in result.name_status() if name_status else result.name_only():
            click.echo(line)
    else:
        patch = result.patch()
        auto = tty and not os.environ.get("NO_COLOR")  # https://no-color.org, as ls and doctor
        write_bytes(
            colour_patch(patch) if color == "always" or (color == "auto" and auto) else patch
        )


def _diff_checkpoints(
    ctx: RepoContext,
    session: Session,
    specs: list[str],
    from_cp: int | None,
    to_cp: int | None,
    names: bool,
    nul: bool,
    as_json: bool,
) -> None:
    from gitsess.services import checkpoints

    if from_cp is None:
        raise click.UsageError("--to needs --from")
    changes = checkpoints.compare(ctx, session, from_cp, to_cp, specs)
    if as_json:
        print_json([asdict(c) for c in changes])
    elif nul:
        _write_records([[c.status, c.path] for c in changes])
    elif names:
        for c in changes:
            click.echo(c.name_status())
    else:
        write_bytes("".join(c.patch for c in changes).encode())


def _write_records(records: list[list[str]]) -> None:
    """`-z`: every field's bytes, each ended by a NUL, as `git diff -z` writes them."""
    write_bytes(b"".join(os.fsencode(field) + b"\0" for record in records for field in record))


def warn_drift(ctx: RepoContext, session: Session) -> None:
    """On stderr, so a patch on stdout stays whole: paths the real worktree changed too."""
    from gitsess.services import inspection

    drifted = [d.path for d in inspection.drift(session, ctx.session_dir(session.id))]
    if drifted:
        click.echo(
            "gitsess: warning: the real worktree also changed (drift): " + ", ".join(drifted),
            err=True,
        )


def status_letter(change: Change) -> str:
    if change.old is None:
        return "A"
    if change.new is None:
        return "D"
    return "T" if change.old.kind != change.new.kind else "M"
