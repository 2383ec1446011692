"""Participant services: start and finish an agent role in a session, stop it, list, collect.

A participant is one (session, role) row. Its isolation root and lever are chosen once, when the
role first runs, and re-applied on every resume, so the CLI finds its own conversations again.
Its seeds follow the profile as it is now: an original made since the last run is linked at
the next (a missing one is noted when the set changes, not every run). The command gets
`GITSESS_ROLE` and `GITSESS_AGENT_ROOT` besides the lever; the turn hook and the MCP arguments
go only to the CLI itself, not to another command run in its role. A run without `--agent` or
`--role` never reaches this package.

`prepare` inserts or finds the row, creates and locks the root, sweeps for refreshed seeds,
seeds the root, marks the row running, starts the refresher, and returns the argv and
environment with the lever applied; `finish` undoes that in reverse. Invariants: running means
holding an `flock` on the root, taken in the registry transaction that marks the row running
(the kernel drops it when the holder dies: no stale "running", no reused pid), and the daemon's
participant list is asked too; a root is a fresh uuid4 made by an exclusive mkdir inside the
transaction that inserts its row; stop and `rm` purge the root after a sweep, never following
a seed into the originals; `collect_orphans` removes roots no row owns, inside a registry write
transaction, leaving locked ones alone. The refresher is a process, not a thread: the command is
started by fork with a pre-exec function, which a second thread could deadlock.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import apsw

from gitsess import processes
from gitsess.errors import GitsessError, option
from gitsess.git.repo import RepoContext
from gitsess.runtime import mount
from gitsess.services.agents import profiles, roots
from gitsess.services.agents.roots import Refresh
from gitsess.services.sessions import SESSION_ID_ENV
from gitsess.store.agent_rows import Participant
from gitsess.store.registry import Registry, Session

ROLE_ENV = "GITSESS_ROLE"
ROOT_ENV = "GITSESS_AGENT_ROOT"
WATCH_LOG = "agents.log"

_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class RunningParticipant:
    """A participant that is running: what to start, and what `finish` must release."""

    participant: Participant
    argv: list[str]
    env: dict[str, str]
    notes: list[str]  # for the user: seeds that could not be linked, refreshed tokens
    lock_fd: int
    watcher: subprocess.Popen[bytes] | None


@dataclass(frozen=True)
class AgentInfo:
    participant: Participant
    session_name: str
    running: bool


@contextmanager
def _registry(ctx: RepoContext, *, create: bool = False) -> Iterator[Registry]:
    with Registry.opened(ctx.registry_path, create=create) as registry:
        if registry is None:
            raise GitsessError(f"no sessions yet in {ctx.common_dir}")
        yield registry


def prepare(
    ctx: RepoContext,
    session: Session,
    *,
    kind: str | None,
    role: str | None,
    argv: Sequence[str],
    env: Mapping[str, str],
    mcp: bool = True,
) -> RunningParticipant:
    """Start (or resume) the participant (session, role) as agent `kind`.

    With `mcp`, the agent's CLI is pointed at gitsess's MCP server (`gitsess mcp`) as its
    profile says (`mcp_args`, `mcp_env`), through a file in its isolation root: the user's
    own config is never edited.

    A new role needs a kind and gets a new root; a known role keeps its root and lever. Fails,
    naming the pid, when the role is running already. The caller must `finish` what this
    returns, whatever happens in between.
    """
    role = role or kind
    if role is None:
        raise GitsessError(f"give {option('agent', 'KIND')}, {option('role', 'ROLE')}, or both")
    if not _ROLE.fullmatch(role):
        raise GitsessError(
            f"invalid role {role!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a"
            " letter or digit"
        )
    known = profiles.load(ctx, env)
    wanted = known.get(kind) if kind is not None else None
    _refuse_inside(ctx, session, [role])
    notes: list[str] = []
    with _registry(ctx) as registry, registry.write():
        row = registry.participant(session.id, role)
        created = row is None
        if row is None:
            if wanted is None or kind is None:
                raise GitsessError(
                    f"session {session.name} has no role {role!r} yet; start it with "
                    + option("agent", "KIND")
                )
            row = _add(ctx, registry, session, role, kind, wanted)
        profile = known.get(row.kind)
        if wanted is not None and wanted.kind != profile.kind:
            raise GitsessError(
                f"role {role!r} of session {session.name} is a {row.kind} agent, not {kind}; "
                f"`gitsess stop {session.name} --role {role}` first, or pick another role"
            )
        root = roots.root_of(ctx.state_dir, row.isolation_uuid)
        if not root.is_dir():
            roots.create_root(root)  # purged behind our back: the role starts afresh
        fd = roots.try_lock(root)
        if fd is None:
            raise _running(session, row)
        try:
            notes += _refresh_notes(roots.sweep(registry.participants(), ctx.state_dir))
            source = profile.source_dir(env)
            seeded = roots.seed(root, source, profile.seeds)
            registry.participant_started(row.id, root=root, pid=os.getpid(), seeded=seeded)
            started = registry.participant(session.id, role)
            assert started is not None
            watcher = _start_watcher(ctx, session, started)
        except BaseException:
            os.close(fd)
            raise
    missing = sorted(s.target for s in seeded if s.status == "missing")
    was_missing = sorted(s.target for s in row.seeded if s.status == "missing")
    if missing and (created or missing != was_missing):
        notes.append(f"{row.kind} role {role}: not linked (no such file): {', '.join(missing)}")
    lever = profiles.Lever.from_json(row.lever)
    run_argv, run_env = lever.apply(
        list(argv) or list(profile.command), profile.visible_env(env), root
    )
    # The CLI's own options go only to the CLI itself, not to another command run as it.
    own = bool(run_argv) and _program(run_argv[0]) in {_program(c) for c in profile.command[:1]}
    if profile.turn_hook and own:
        _write_turn_hooks(root)
        hook = [a.replace(profiles.ROOT_MARK, str(root)) for a in profile.turn_hook]
        run_argv = [run_argv[0], *hook, *run_argv[1:]]
    run_env |= {ROLE_ENV: role, ROOT_ENV: str(root)}
    if mcp:
        run_argv, run_env = _with_mcp(profile, root, run_argv, run_env, own)
    return RunningParticipant(started, run_argv, run_env, notes, fd, watcher)


def _program(arg: str) -> str:
    return os.path.basename(arg)


def _write_turn_hooks(root: Path) -> None:
    """Claude Code settings with a hook that checkpoints the session at each prompt."""
    command = shlex.join([sys.executable, "-m", "gitsess", "checkpoint", "--turn"])
    hooks = {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": command}]}]}}
    (root / profiles.TURN_HOOKS_FILE).write_text(json.dumps(hooks, indent=2) + "\n")


MCP_CONFIG = "gitsess-mcp.json"


def _with_mcp(
    profile: profiles.Profile, root: Path, argv: list[str], env: dict[str, str], own: bool
) -> tuple[list[str], dict[str, str]]:
    if profile.mcp_env is None and not (profile.mcp_args and own):
        return argv, env
    server = {"command": sys.executable, "args": ["-m", "gitsess", "mcp"]}
    config = root / MCP_CONFIG
    config.write_text(json.dumps({"mcpServers": {"gitsess": server}}, indent=2) + "\n")
    # JSON strings and arrays of them are valid TOML too
    toml = f"{{command = {json.dumps(server['command'])}, args = {json.dumps(server['args'])}}}"
    args = tuple(
        a.replace(profiles.MCP_CONFIG_MARK, str(config)).replace(profiles.MCP_TOML_MARK, toml)
        for a in profile.mcp_args
    )
    return profiles.Lever(env=profile.mcp_env, args=args if own else ()).apply(argv, env, config)


def _add(
    ctx: RepoContext,
    registry: Registry,
    session: Session,
    role: str,
    kind: str,
    profile: profiles.Profile,
) -> Participant:
    isolation_uuid = str(uuid4())
    root = roots.root_of(ctx.state_dir, isolation_uuid)
    try:
        row = registry.add_participant(
            session_id=session.id,
            role=role,
            kind=kind,
            isolation_uuid=isolation_uuid,
            root=root,
            lever=profile.lever.to_json(),
        )
    except apsw.ConstraintError as e:
        raise GitsessError(f"isolation root {isolation_uuid} is taken already") from e
    # Inside the registry transaction: a root that cannot be made leaves no row either.
    roots.create_root(root)
    return row


def _refuse_inside(ctx: RepoContext, session: Session, roles: Collection[str]) -> None:
    """The daemon knows who is inside even when the `gitsess run` that started them died."""
    status = mount.status(ctx.session_dir(session.id))
    for p in status.participants if status is not None else []:
        if p.get("role") not in roles:
            continue
        pid = p.get("pid")
        if isinstance(pid, int) and not processes.alive(pid):
            # its `gitsess run` was killed; what it started runs on, inside, as that role
            left = _left_running(session, str(p["role"]))
            pids = ", ".join(map(str, left)) or "unknown"
            raise GitsessError(
                f"role {p['role']} is still running in session {session.name}: its gitsess run"
                f" (pid {pid}) is gone, but the command it started is not (pid {pids}); end "
                "that, or pick another role"
            )
        raise GitsessError(
            f"role {p['role']} is already running in session {session.name} (pid {pid})"
        )


def _left_running(session: Session, role: str) -> list[int]:
    return processes.with_env({SESSION_ID_ENV: session.id, ROLE_ENV: role})


def _running(session: Session, row: Participant) -> GitsessError:
    return GitsessError(
        f"role {row.role} is already running in session {session.name} (pid {row.pid})"
    )


def _start_watcher(
    ctx: RepoContext, session: Session, participant: Participant
) -> subprocess.Popen[bytes] | None:
    """A process that watches the root's seeds while the agent runs and sweeps on a refresh.

    A process, not a thread: the command is started with fork and a pre-exec function, which a
    second thread in this process could deadlock. `finish` stops it; it also ends when its stdin
    (our pipe) closes, so that it never outlives us.
    """
    root = participant.root
    seeds = [str(root / s.path) for s in participant.seeded if s.status == "linked"]
    if not seeds:
        return None
    log_path = ctx.session_dir(session.id) / WATCH_LOG
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "gitsess.services.agents.refresher",
                str(ctx.common_dir),
                str(ctx.state_dir),
                *seeds,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd="/",
            start_new_session=True,
        )


def finish(ctx: RepoContext, prepared: RunningParticipant) -> list[str]:
    """The participant's command has ended: stop watching, take in a token it refreshed, mark it
    idle and release the role. Returns notes for the user."""
    watcher = prepared.watcher
    if watcher is not None:
        assert watcher.stdin is not None
        watcher.stdin.close()
        # Not waiting for it to see its stdin close: it may still be starting up, and a
        # watcher that has not started has nothing to finish; the sweep below does its work.
        watcher.terminate()
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    try:
        with _registry(ctx) as registry, registry.write():
            refreshed = roots.sweep(registry.participants(), ctx.state_dir)
            registry.participant_ended(prepared.participant.id)
    finally:
        os.close(prepared.lock_fd)
    return _refresh_notes(refreshed)


def refresh(ctx: RepoContext) -> list[Refresh]:
    """Sweep every root of the repository for refreshed seeds (see `roots.sweep`)."""
    with _registry(ctx) as registry, registry.write():
        return roots.sweep(registry.participants(), ctx.state_dir)


def _refresh_notes(refreshed: list[Refresh]) -> list[str]:
    return [
        f"an agent refreshed {r.target}: copied it back, linked again in {len(r.relinked)} root(s)"
        for r in refreshed
        if r.copied_from is not None
    ]


def stop(ctx: RepoContext, session: Session, role: str) -> Participant:
    """Forget a role: its row goes and its root is purged (the linked originals stay)."""
    with _registry(ctx) as registry, registry.write():
        row = registry.participant(session.id, role)
        if row is None:
            raise GitsessError(f"session {session.name} has no role {role!r}")
        _purge(ctx, registry, session, [row])
        registry.delete_participant(row.id)
    return row


def purge_session(ctx: RepoContext, registry: Registry, session: Session) -> None:
    """Purge the roots of every participant of a session about to be removed; call inside the
    registry transaction that removes it (its rows go with the session's)."""
    _purge(ctx, registry, session, registry.participants(session.id))


def _purge(ctx: RepoContext, registry: Registry, session: Session, rows: list[Participant]) -> None:
    _refuse_inside(ctx, session, [row.role for row in rows])
    held: list[int] = []
    try:
        for row in rows:
            root = roots.root_of(ctx.state_dir, row.isolation_uuid)
            if not root.is_dir():
                continue
            fd = roots.try_lock(root)
            if fd is None:
                raise _running(session, row)
            held.append(fd)
        # A token refreshed in a root about to go must reach the original first.
        roots.sweep(registry.participants(), ctx.state_dir)
        for row in rows:
            roots.purge(roots.root_of(ctx.state_dir, row.isolation_uuid))
    finally:
        for fd in held:
            os.close(fd)


def list_participants(ctx: RepoContext, session: Session | None) -> list[AgentInfo]:
    """The participants of one session, or of all; never creates the registry."""
    with Registry.opened(ctx.registry_path, create=False) as registry:
        if registry is None:
            return []
        names = {s.id: s.name for s in registry.all()}
        rows = registry.participants(None if session is None else session.id)
    return [
        AgentInfo(p, names[p.session_id], p.state == "running" and _running_still(p)) for p in rows
    ]


def _running_still(p: Participant) -> bool:
    """Its `gitsess run` runs, or what that started does after it was killed."""
    if _alive(p.pid):
        return True
    return bool(processes.with_env({SESSION_ID_ENV: p.session_id, ROLE_ENV: p.role}))


def _alive(pid: int | None) -> bool:
    return pid is not None and processes.alive(pid)


def collect_orphans(ctx: RepoContext, dry_run: bool) -> list[Path]:
    """Remove roots that no participant owns (its row or its session is gone).

    Runs in a registry transaction, so a root that `prepare` is creating right now, together
    with its row, is never taken for an orphan. A root whose lock is held is left alone.
    """
    homes = roots.homes_dir(ctx.state_dir)
    if not homes.is_dir():
        return []
    found = []
    with _registry(ctx, create=True) as registry, registry.write():
        owned = registry.isolation_uuids()
        for entry in sorted(homes.iterdir()):
            if not _UUID.fullmatch(entry.name) or entry.name in owned:
                continue
            if entry.is_symlink() or not entry.is_dir():
                continue
            fd = roots.try_lock(entry)
            if fd is None:
                continue
            try:
                if not dry_run:
                    roots.purge(entry)
            finally:
                os.close(fd)
            found.append(entry)
    return found
