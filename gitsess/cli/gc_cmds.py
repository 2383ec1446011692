"""`gitsess gc`: remove what nothing owns any more."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import click

from gitsess.cli.base import console, escape, print_json
from gitsess.cli.group import cli
from gitsess.cli.hook_cmds import action_line
from gitsess.services import agents
from gitsess.services import gc as sweeps
from gitsess.services.sessions import RepoContext, discover

# A sweep removes (or with dry_run only finds) what is left over, and returns it. Each kind of
# leftover appends its own sweep here, with the word that names one item of it. The sweeps of
# sessions, mounts and archives (gitsess.services.gc, shared with the git hooks) run first.
Sweep = Callable[[RepoContext, bool], list[Path]]
SWEEPS: tuple[tuple[str, Sweep], ...] = (("orphaned agent root", agents.collect_orphans),)


@cli.command()
@click.option("--dry-run", "-n", is_flag=True, help="Only list what would be done.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gc(dry_run: bool, as_json: bool) -> None:
    """Clean up: sessions whose branch or worktree is gone, merged branches, changes a commit
    took, dead mounts, orphaned session and agent state dirs, archives older than
    gitsess.gc.archiveMaxAge (default 30 days)."""
    ctx = discover()
    actions = sweeps.collect(ctx, dry_run=dry_run)
    leftovers = [(what, path) for what, sweep in SWEEPS for path in sweep(ctx, dry_run)]
    if as_json:
        print_json(
            [asdict(a) for a in actions]
            + [{"what": what, "name": str(path), "done": not dry_run} for what, path in leftovers]
        )
    else:
        for action in actions:
            line = action_line(action)
            console().print(escape(line[0].upper() + line[1:]))
            for note in action.notes:
                console().print(f"  {escape(note)}")
        verb = "Would remove" if dry_run else "Removed"
        for what, path in leftovers:
            console().print(f"{verb} {what} {escape(str(path))}")
        if not actions and not leftovers:
            console().print("Nothing to collect.")
    if any(a.error is not None for a in actions):
        sys.exit(1)
