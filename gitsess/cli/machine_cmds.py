"""Commands about the machine and the product: doctor, tour."""

from __future__ import annotations

import shlex
from dataclasses import asdict

import click
from rich.table import Table

from gitsess.cli.base import console, escape, print_json
from gitsess.cli.group import cli
from gitsess.services import doctor, tour


@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--repair",
    is_flag=True,
    help="Rebuild the registry from the session dirs (an unreadable one is set aside).",
)
@click.pass_context
def doctor_command(ctx: click.Context, as_json: bool, repair: bool) -> None:
    """Check what this machine and directory offer gitsess."""
    if repair:
        from gitsess.services import repair as repairing
        from gitsess.services.sessions import discover

        done = repairing.repair(discover())
        if done.moved_aside is not None:
            click.echo(f"The unreadable registry is kept as {done.moved_aside}")
        if done.mended:
            click.echo(f"Mended {done.mended} text value(s) of the registry that were not UTF-8")
        for name in done.recovered:
            click.echo(f"Recovered session {name} (`gitsess show {name}`)")
        if done.moved_aside is None and not done.recovered and not done.mended:
            click.echo("Nothing to repair.")
        return
    checks = doctor.run_checks()
    if as_json:
        print_json([asdict(c) for c in checks])
    else:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("CHECK", "VERDICT", "DETAIL"):
            table.add_column(column)
        styles = {"ok": "green", "warn": "yellow", "fail": "bold red"}
        for c in checks:
            verdict = f"[{styles[c.verdict]}]{c.verdict.upper()}[/]"
            table.add_row(c.name, verdict, escape(c.detail))
        console().print(table)
    if any(c.verdict == "fail" for c in checks):
        ctx.exit(1)


@cli.command("tour")
@click.pass_context
def tour_command(ctx: click.Context) -> None:
    """Walk through gitsess on a demo repository in a temporary directory."""
    ctx.exit(tour.run(_show_tour))


def _show_tour(event: tour.TourEvent) -> None:
    out = console()
    if event.kind == "say":
        # (line by line: a line break is the tour's own, not a control character to show)
        out.print("\n".join(escape(line) for line in event.text.split("\n")))
    elif event.kind == "command":
        out.print(f"[bold]$ {escape(shlex.join(['gitsess', *event.args]))}[/]")
    else:
        out.print(f"[red]The tour stopped: that step failed (exit {event.code}).[/]")
