"""Commands for live sessions: run, mount, umount, ps.

What only some paths need (the agents, apply, rich tables) is imported there: mounting is
meant to take well under a second, and importing all of it was a third of that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import click

from gitsess.cli.base import (
    SessionCommand,
    complete_agent_kind,
    complete_role,
    complete_session,
    complete_session_first,
    console,
    echo_mounted,
    escape,
    print_json,
    session_ref,
    takes_session,
    takes_worktree,
    worktree_spec,
)
from gitsess.cli.group import cli
from gitsess.errors import GitsessError
from gitsess.services import live, sessions
from gitsess.services.live import Stray
from gitsess.services.sessions import RepoContext, Session, discover


@cli.command(cls=SessionCommand, context_settings={"allow_interspersed_args": False})
@takes_session
@takes_worktree
@click.option("--read-only", is_flag=True, help="Every write inside fails with EROFS.")
@click.option(
    "--agent",
    "agent_kind",
    metavar="KIND",
    shell_complete=complete_agent_kind,
    help="Run an agent CLI (claude, cline, codex, gemini, agy, hermes, home, or one of your"
    " agents.toml) with its own state directory.",
)
@click.option(
    "--role",
    metavar="ROLE",
    shell_complete=complete_role,
    help="The agent's role in the session (default: KIND); running a role again resumes it.",
)
@click.option(
    "--rebind",
    is_flag=True,
    help="Move a session whose worktree switched branches onto the branch checked out now.",
)
@click.option(
    "--no-mcp",
    is_flag=True,
    help="--agent: do not register gitsess's MCP server (`gitsess mcp`) with the agent.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(
    offsets: tuple[str, ...],
    session_option: str | None,
    worktree_branch: str | None,
    from_rev: str | None,
    read_only: bool,
    agent_kind: str | None,
    role: str | None,
    rebind: bool,
    no_mcp: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (default: $SHELL, or the agent's CLI) inside a session, creating or resuming
    it.

    Give the command after `--`. Other terminals running the same session share its live view.
    With --agent/--role, the command keeps its state (conversations) in the role's own
    directory, linked to your shared login and settings.
    """
    ref, _ = session_ref([], 0, offsets, session_option)
    ctx = discover()
    spec = worktree_spec(worktree_branch, from_rev)
    if ref is None and not os.environ.get(sessions.SESSION_ENV):
        session = sessions.create(ctx, worktree=spec)
        created = True
    else:
        session, created = sessions.resolve_or_create(ctx, ref, worktree=spec)
    if spec is not None and not created and not session.created_worktree:
        # the run would not be in the worktree of its own asked for
        raise GitsessError(
            f"session {session.name} exists, in {session.worktree}, not in a worktree of its "
            "own: --worktree makes one only for a new session; leave it out to run in "
            f"{session.name}, or give a new name"
        )
    if created:  # a typo of a name must not go unnoticed
        hint = sessions.close_names(ctx, session.name)
        click.echo(f"gitsess: new session {session.name} ({session.id[:8]}){hint}", err=True)
    session = sessions.touch(ctx, sessions.check_bound(ctx, session, rebind=rebind))
    session = _reconciled(ctx, session)
    argv = list(command)
    env: Mapping[str, str] = os.environ
    agent = None
    if agent_kind is not None or role is not None:
        from gitsess.services import agents

        agent = agents.prepare(
            ctx, session, kind=agent_kind, role=role, argv=argv, env=env, mcp=not no_mcp
        )
        argv, env, role = agent.argv, agent.env, agent.participant.role
        for note in agent.notes:
            click.echo(f"gitsess: {note}", err=True)
    argv = argv or [os.environ.get("SHELL") or "/bin/sh"]
    cwd = Path.cwd()
    code = 1
    removed = False
    try:
        run_id = sessions.start_run(ctx, session, argv, cwd, role)
        try:
            result = live.run(
                ctx,
                session,
                argv,
                cwd=cwd,
                env=env,
                read_only=read_only or session.read_only,
                role=role,
                run_id=run_id,
                own_state=None if agent is None else agent.participant.root,
            )
            code = result.exit_code
        except GitsessError as e:
            code = e.exit_code
            if created and code in (126, 127):
                # nothing ran: the session this run made would only be a leftover
                sessions.remove(ctx, session.id, force=True)
                removed = True
                click.echo(f"gitsess: removed the new session {session.name}", err=True)
            raise
        finally:
            if not removed:
                sessions.end_run(ctx, run_id, code)
    finally:
        if agent is not None:
            from gitsess.services import agents

            for note in agents.finish(ctx, agent):
                click.echo(f"gitsess: {note}", err=True)
    sys.exit(code)


@cli.command(cls=SessionCommand)
@click.argument("args", nargs=-1, metavar="[SESSION] [DIR]", shell_complete=complete_session_first)
@takes_session
@click.option("--allow-other", is_flag=True, help="Let other users reach the mount.")
@click.option("--read-only", is_flag=True, help="Mount read-only.")
@click.option("--force", is_flag=True, help="Mount over a DIR that holds files (hiding them).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def mount(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    allow_other: bool,
    read_only: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Mount a session's view (at DIR, default its session dir) until `gitsess umount`."""
    given = list(args)
    directory = None
    if len(given) == 2 or (len(given) == 1 and (offsets or session_option)):
        directory = Path(given.pop()).absolute()
    ref, _ = session_ref(given, 0, offsets, session_option)
    ctx = discover()
    session = _reconciled(ctx, sessions.resolve(ctx, ref))
    status = live.keep_mounted(
        ctx,
        session,
        mountpoint=directory,
        allow_other=allow_other,
        read_only=read_only,
        force=force,
    )
    if as_json:
        print_json({"name": session.name, "id": session.id, "mountpoint": status.mountpoint})
        return
    echo_mounted(session, status.mountpoint)


def _reconciled(ctx: RepoContext, session: Session) -> Session:
    """An apply killed half-way is completed before anyone works in the session again."""
    if not sessions.apply_interrupted(ctx, session):
        return session
    from gitsess.services import apply_journal

    done = apply_journal.reconcile(ctx, session)
    for note in done.notes:
        click.echo(f"gitsess: {note}", err=True)
    return done.session


@cli.command(cls=SessionCommand)
@click.argument("session", required=False, shell_complete=complete_session)
@takes_session
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def umount(
    session: str | None, offsets: tuple[str, ...], session_option: str | None, as_json: bool
) -> None:
    """Unmount a session's view (participants still inside lose it)."""
    ref, _ = session_ref([session] if session else [], 0, offsets, session_option)
    ctx = discover()
    found = sessions.resolve(ctx, ref)
    unmounted = live.unmount(ctx, found)
    if as_json:
        print_json({"name": found.name, "id": found.id, "unmounted": unmounted})
        return
    if unmounted:
        console().print(f"Unmounted session [bold]{escape(found.name)}[/]")
    else:
        console().print(f"Session [bold]{escape(found.name)}[/] was not mounted")


def participant_json(p: Mapping[str, object]) -> dict[str, object]:
    """Who is inside, as the daemon says, in docs/json.md's words (its `run_id` and
    `joined_at` in seconds were neither)."""
    joined = p.get("joined_at")
    return {
        "pid": p.get("pid"),
        "role": p.get("role"),
        "read_only": p.get("read_only"),
        "command": p.get("command"),
        "run": p.get("run_id"),
        "joined_at": (
            datetime.fromtimestamp(joined, UTC) if isinstance(joined, int | float) else None
        ),
    }


def stray_json(s: Stray) -> dict[str, object]:
    """A daemon whose view is gone, as a row of `ps --json`."""
    return {
        "name": None,
        "id": s.session_id,
        "daemon_pid": s.pid,
        "mountpoint": None,
        "kept": False,
        "read_only": False,
        "participants": [],
        "stray": s.reason,
    }


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ps(as_json: bool) -> None:
    """List mounted sessions of this repository and who is inside."""
    from rich.table import Table

    ctx = discover()
    mounted = live.live_sessions(ctx, [i.session for i in sessions.list_sessions(ctx)])
    strays = live.stray_daemons()
    if as_json:
        print_json(
            [
                {
                    "name": m.session.name,
                    "id": m.session.id,
                    "daemon_pid": m.status.daemon_pid,
                    "mountpoint": m.status.mountpoint,
                    "kept": m.status.persistent,
                    "read_only": m.status.read_only,
                    "participants": [participant_json(p) for p in m.status.participants],
                    "stray": None,
                }
                for m in mounted
            ]
            + [stray_json(s) for s in strays]
        )
        return
    for s in strays:
        console().print(
            f"Stray daemon {s.pid} of session {escape(s.session_id)}: {escape(s.reason)}"
            f" ({escape(live.stray_ender(ctx, s))})"
        )
    if not mounted:
        console().print("No session is mounted.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "DAEMON", "MOUNT", "KEPT", "PARTICIPANTS"):
        table.add_column(column)
    for m in mounted:
        people = ", ".join(
            f"{p.get('pid')}{' ' + p['role'] if p.get('role') else ''}"
            f" {' '.join(p.get('command') or [])}"
            for p in m.status.participants
        )
        table.add_row(
            escape(m.session.name),
            str(m.status.daemon_pid),
            escape(m.status.mountpoint),
            "yes" if m.status.persistent else "no",
            escape(people or "-"),
        )
    console().print(table)
