"""Commands about the machine and the product: doctor, tour."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.table import Table

from gitsess import doctor, tour
from gitsess.cli.base import console, escape, print_json
from gitsess.cli.group import cli


@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def doctor_command(ctx: click.Context, as_json: bool) -> None:
    """Check what this machine and directory offer gitsess."""
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
    ctx.exit(tour.run(console().print))
