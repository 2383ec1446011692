"""`gitsess gc`: remove what nothing owns any more."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from rich.markup import escape

from gitsess import agents
from gitsess.cli.base import cli, console
from gitsess.git.repo import RepoContext
from gitsess.sessions import discover

# A sweep removes (or with dry_run only finds) what is left over, and returns it. Each kind of
# leftover appends its own sweep here, with the word that names one item of it.
Sweep = Callable[[RepoContext, bool], list[Path]]
SWEEPS: tuple[tuple[str, Sweep], ...] = (("orphaned agent root", agents.collect_orphans),)


@cli.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
def gc(dry_run: bool) -> None:
    """Remove leftovers: agent state dirs whose role or session is gone."""
    ctx = discover()
    verb = "Would remove" if dry_run else "Removed"
    count = 0
    for what, sweep in SWEEPS:
        for path in sweep(ctx, dry_run):
            console.print(f"{verb} {what} {escape(str(path))}")
            count += 1
    if not count:
        console.print("Nothing to collect.")
