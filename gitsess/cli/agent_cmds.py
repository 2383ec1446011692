"""Commands for agent participants: agents (list), stop."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import click
from rich.table import Table

from gitsess.cli.base import (
    SessionCommand,
    ago,
    complete_role,
    complete_session,
    console,
    escape,
    print_json,
    session_ref,
    takes_session,
)
from gitsess.cli.group import cli
from gitsess.services import agents, sessions
from gitsess.services.sessions import discover


def _seeded(info: agents.AgentInfo) -> str:
    counts: dict[str, int] = {}
    for s in info.participant.seeded:
        counts[s.status] = counts.get(s.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "-"


def _json(info: agents.AgentInfo) -> dict[str, object]:
    fields = asdict(info.participant)
    # The participant's row id is the registry's business; `name` and `id` are the session's.
    del fields["id"], fields["state"]
    return {
        "name": info.session_name,
        "id": fields.pop("session_id"),
        **fields,
        "status": "running" if info.running else "idle",
        "lever": json.loads(info.participant.lever),
    }


@cli.command("agents", cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def agents_cmd(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """List the agent roles of a session (default: of every session), with their state dirs."""
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    ctx = discover()
    chosen = None
    if ref is not None or os.environ.get(sessions.SESSION_ENV):
        chosen = sessions.resolve(ctx, ref)
    found = agents.list_participants(ctx, chosen)
    if as_json:
        print_json([_json(i) for i in found])
        return
    if not found:
        console().print(
            "No agent roles yet."
            if chosen is None
            else f"Session {chosen.name} has no agent roles."
        )
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in (
        "SESSION",
        "ROLE",
        "KIND",
        "STATE",
        "PID",
        "LAST START",
        "LEVER",
        "SEEDS",
        "ROOT",
    ):
        table.add_column(column)
    for i in found:
        p = i.participant
        table.add_row(
            escape(i.session_name),
            escape(p.role),
            escape(p.kind),
            "running" if i.running else "idle",
            str(p.pid) if i.running else "-",
            ago(p.started_at) if p.started_at else "-",
            escape(agents.Lever.from_json(p.lever).describe()),
            _seeded(i),
            escape(str(p.root)),
        )
    console().print(table)


@cli.command(cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option(
    "--role", required=True, metavar="ROLE", help="The role to stop.", shell_complete=complete_role
)
def stop(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, role: str
) -> None:
    """Forget an agent role: purge its state dir (conversations); shared files stay as they are."""
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    ctx = discover()
    found = sessions.resolve(ctx, ref)
    gone = agents.stop(ctx, found, role)
    console().print(
        f"Stopped role [bold]{escape(role)}[/] of session [bold]{escape(found.name)}[/];"
        f" removed {escape(str(gone.root))}"
    )
