"""Commands of a session's checkpoints: checkpoint, checkpoints, rewind, undo."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from typing import Any

import click

from gitsess.cli.base import SessionCommand, console, escape, print_json, session_ref, takes_session
from gitsess.cli.group import cli
from gitsess.services import checkpoints, sessions
from gitsess.services.sessions import discover


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION]")
@click.option("--message", "-m", default="", help="What this state is.")
# An agent's hook (see `turn_hook` in the agent profiles): the prompt comes as JSON on stdin.
@click.option("--turn", is_flag=True, hidden=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@takes_session
def checkpoint(
    args: tuple[str, ...],
    message: str,
    turn: bool,
    as_json: bool,
    offsets: tuple[str, ...],
    session_option: str | None,
) -> None:
    """Make a checkpoint of a session, mounted or not."""
    ref, _ = session_ref(args, 0, offsets, session_option)
    ctx = discover()
    session = sessions.resolve(ctx, ref)
    if turn:
        checkpoints.checkpoint(
            ctx,
            session,
            checkpoints.turn_message(sys.stdin.read()),
            kind="turn",
            role=os.environ.get("GITSESS_ROLE"),
        )
        return
    made = checkpoints.checkpoint(ctx, session, message)
    if as_json:
        print_json(made_json(made))
        return
    console().print(f"Checkpoint {made.checkpoint} of [bold]{escape(made.session.name)}[/]")


def made_json(made: checkpoints.Made) -> dict[str, Any]:
    """What `checkpoint --json` prints (and the MCP tool answers)."""
    return {"name": made.session.name, "id": made.session.id, "checkpoint": made.checkpoint}


def listing_json(found: checkpoints.Listing) -> dict[str, Any]:
    """What `checkpoints --json` prints (and the MCP tool answers)."""
    return {
        "name": found.session.name,
        "id": found.session.id,
        "checkpoints": [
            {
                "checkpoint": c.id,
                "time_ns": c.time_ns,
                "kind": c.kind,
                "message": c.message,
                "run": c.run_id,
                "role": c.role,
                "added_paths": c.added,
                "removed_paths": c.removed,
                "changed_paths": c.changed,
            }
            for c in found.checkpoints
        ],
        "operations": [
            {
                "operation": o.id,
                "time_ns": o.time_ns,
                "kind": o.kind,
                "checkpoint": o.target,
                "before": o.before,
                "after": o.after,
            }
            for o in found.operations
        ],
        "changed_since_last": found.changed_since_last,
    }


def rewind_json(done: checkpoints.Rewind) -> dict[str, Any]:
    """What `rewind --json` and `undo --json` print (and the MCP tools answer)."""
    return {
        "name": done.session.name,
        "id": done.session.id,
        "operation": done.operation,
        "kind": done.kind,
        "checkpoint": done.target,
        "before": done.before,
        "live": done.live,
    }


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


@cli.command("checkpoints", cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@takes_session
def list_checkpoints(
    args: tuple[str, ...], as_json: bool, offsets: tuple[str, ...], session_option: str | None
) -> None:
    """List a session's checkpoints, oldest first, with what changed since the one before."""
    ref, _ = session_ref(args, 0, offsets, session_option)
    ctx = discover()
    found = checkpoints.listing(ctx, sessions.resolve(ctx, ref))
    if as_json:
        print_json(listing_json(found))
        return
    out = console()
    for cp in found.checkpoints:
        who = cp.kind + (f" ({cp.role})" if cp.role else "")
        what = f"+{cp.added} -{cp.removed} ~{cp.changed}"
        out.print(f"{cp.id:>5}  {_when(cp.time_ns)}  {who:<14} {what:<14} {escape(cp.message)}")
    if found.changed_since_last:
        out.print("       (changes since the last checkpoint)")


def _report(done: checkpoints.Rewind, as_json: bool) -> None:
    if as_json:
        print_json(rewind_json(done))
        return
    console().print(
        f"Session [bold]{escape(done.session.name)}[/] is back at checkpoint {done.target};"
        f" what it replaced is checkpoint {done.before} (`gitsess undo` brings it back)"
    )


_FORCE_HELP = "Also while a process holds a file it changes open for writing."


class _WithPaths(SessionCommand):
    """What follows `--` is paths (relative to the worktree's root), kept aside."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["paths"], args = args[at + 1 :], args[:at]
            if not ctx.meta["paths"]:
                # (an empty `-- $PATHS` must not rewind the whole session)
                raise click.UsageError("no PATHSPEC after `--` (without `--`: the whole session)")
        return super().parse_args(ctx, args)


@cli.command(cls=_WithPaths)
@click.argument("args", nargs=-1, metavar="[SESSION] CHECKPOINT [-- PATHSPEC...]")
@click.option("--force", is_flag=True, help=_FORCE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@takes_session
def rewind(
    args: tuple[str, ...],
    force: bool,
    as_json: bool,
    offsets: tuple[str, ...],
    session_option: str | None,
) -> None:
    """Bring a session back to a checkpoint (live if it is mounted); undo reverses it."""
    specs = [p.strip("/") for p in click.get_current_context().meta.get("paths", [])]
    ref, (target,) = session_ref(args, 1, offsets, session_option)
    if not target.isdigit():
        raise click.UsageError(f"CHECKPOINT is a number (gitsess checkpoints), not {target!r}")
    ctx = discover()
    session = sessions.resolve(ctx, ref)
    if specs:
        _report(checkpoints.rewind_paths(ctx, session, int(target), specs), as_json)
        return
    _report(checkpoints.rewind(ctx, session, int(target), force=force), as_json)


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION]")
@click.option("--force", is_flag=True, help=_FORCE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@takes_session
def undo(
    args: tuple[str, ...],
    force: bool,
    as_json: bool,
    offsets: tuple[str, ...],
    session_option: str | None,
) -> None:
    """Undo the last run (back to its checkpoint), or the last rewind or undo."""
    ref, _ = session_ref(args, 0, offsets, session_option)
    ctx = discover()
    _report(checkpoints.undo(ctx, sessions.resolve(ctx, ref), force=force), as_json)
