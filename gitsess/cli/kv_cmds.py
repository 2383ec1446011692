"""`gitsess kv`: a session's key-value store, for the processes inside and out.

Its own module: `kv get` runs in scripts and agents' loops, and loads neither rich nor pygit2,
nor the table `kv ls` prints.
"""

from __future__ import annotations

import click

from gitsess.cli.base import (
    SessionGroup,
    ago,
    group_ref,
    group_session,
    print_json,
    session_of,
    session_ref,
)
from gitsess.cli.group import cli
from gitsess.services import kv


@cli.group("kv", cls=SessionGroup, subcommand_metavar="[SESSION] get|set|rm|ls [ARGS]...")
@group_session
@click.pass_context
def kv_group(ctx: click.Context, session_arg: str | None, session_option: str | None) -> None:
    """A session's key-value store of JSON values: kv [SESSION] get|set|rm|ls.

    Inside a session (gitsess run) the session is that one.
    """
    ref, _ = session_ref([session_arg] if session_arg else [], 0, [], session_option)
    ctx.obj = ref


def _kv_text(value: object) -> str:
    """A string as itself, anything else as its JSON."""
    return value if isinstance(value, str) else kv.encode(value)


@kv_group.command("get")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print the value as JSON.")
def kv_get(key: str, as_json: bool) -> None:
    """Print KEY's value (a string as itself unless --json)."""
    ctx, found = session_of(group_ref())
    value = kv.get(ctx, found, key).value
    click.echo(kv.encode(value) if as_json else _kv_text(value))


@kv_group.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--json", "as_json", is_flag=True, help="VALUE is JSON (else it is a string).")
def kv_set(key: str, value: str, as_json: bool) -> None:
    """Set KEY to VALUE."""
    decoded = kv.decode(value) if as_json else value
    ctx, found = session_of(group_ref())
    kv.put(ctx, found, key, decoded)


@kv_group.command("rm")
@click.argument("key")
def kv_rm(key: str) -> None:
    """Remove KEY."""
    ctx, found = session_of(group_ref())
    kv.remove(ctx, found, key)


@kv_group.command("ls")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON: one object per key, with its value and when it was set.",
)
def kv_ls(as_json: bool) -> None:
    """List the keys and their values."""
    from gitsess.cli import table

    ctx, found = session_of(group_ref())
    items = kv.items(ctx, found)
    if as_json:
        print_json([{"key": i.key, "value": i.value, "updated_at": i.updated} for i in items])
        return
    columns = [
        table.Column("KEY"),
        table.Column("VALUE", shrink=1, minimum=20),
        table.Column("SET"),
    ]
    rows = [
        [table.Cell(i.key, "bold"), table.Cell(_kv_text(i.value)), table.Cell(ago(i.updated))]
        for i in items
    ]
    table.echo(columns, rows)
