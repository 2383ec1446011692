"""The conflict radar's command: overlaps."""

from __future__ import annotations

import click

from gitsess.cli.base import console, escape, print_json
from gitsess.cli.group import cli
from gitsess.services import overlaps as radar
from gitsess.services.sessions import discover


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def overlaps(as_json: bool) -> None:
    """Paths that two sessions (or a session and its branch's new commits) both changed, and
    whether applying both would conflict. Computed in memory: nothing is written."""
    found = radar.overlaps(discover())
    if as_json:
        print_json([o.to_json() for o in found])
        return
    if not found:
        console().print("No two sessions changed the same path.")
        return
    for o in found:
        other = f"branch {o.other}" if o.kind == "branch" else o.other
        verdict = (
            f"[red]would conflict[/] on {escape(', '.join(o.conflicts))}"
            if o.conflict
            else "merge cleanly"
        )
        console().print(
            f"[bold]{escape(o.name)}[/] and [bold]{escape(other)}[/] both changed"
            f" {len(o.paths)} path(s): {escape(', '.join(o.paths))}; {verdict}"
        )
