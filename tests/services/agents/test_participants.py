"""Participant services without a mount: prepare/finish, invariants, stop, rm, gc, refresh."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.services import agents, sessions
from gitsess.services.agents.roots import homes_dir
from gitsess.store.registry import Session

from .conftest import Snapshot


@pytest.fixture
def session(ctx: RepoContext) -> Session:
    return sessions.create(ctx, "s")


class Started:
    """The participants a test started; those it did not finish are finished at teardown."""

    def __init__(self, ctx: RepoContext) -> None:
        self.ctx = ctx
        self.running: list[agents.RunningParticipant] = []

    def prepare(
        self,
        session: Session,
        kind: str | None,
        role: str | None = None,
        argv: list[str] | None = None,
    ) -> agents.RunningParticipant:
        p = agents.prepare(self.ctx, session, kind=kind, role=role, argv=argv or [], env=os.environ)
        self.running.append(p)
        return p

    def finish(self, p: agents.RunningParticipant) -> list[str]:
        self.running.remove(p)
        return agents.finish(self.ctx, p)


@pytest.fixture
def started(ctx: RepoContext) -> Iterator[Started]:
    s = Started(ctx)
    yield s
    for p in list(s.running):
        s.finish(p)


def test_a_new_role_gets_a_private_seeded_root_and_its_lever(
    ctx: RepoContext,
    session: Session,
    started: Started,
    originals: Callable[[], Snapshot],
    home: Path,
) -> None:
    p = started.prepare(session, "claude", argv=["claude", "--continue"])
    root = p.participant.root
    assert root == homes_dir(ctx.state_dir) / p.participant.isolation_uuid
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (p.participant.role, p.participant.kind, p.participant.state) == (
        "claude",
        "claude",
        "running",
    )
    assert p.participant.pid == os.getpid()
    # the settings hold the hook that checkpoints each turn; the MCP server's registration
    # is a file in the root too
    hooks = str(root / "gitsess-turn-hooks.json")
    mcp = str(root / "gitsess-mcp.json")
    assert p.argv == ["claude", "--mcp-config", mcp, "--settings", hooks, "--continue"]
    assert "checkpoint --turn" in Path(hooks).read_text()
    assert p.env["CLAUDE_CONFIG_DIR"] == str(root)
    assert (p.env["GITSESS_ROLE"], p.env["GITSESS_AGENT_ROOT"]) == ("claude", str(root))
    assert os.readlink(root / ".credentials.json") == str(home / ".claude/.credentials.json")
    assert os.readlink(root / "plugins") == str(home / ".claude/plugins")
    assert p.notes == []
    started.finish(p)
    [info] = agents.list_participants(ctx, session)
    assert (info.participant.state, info.running) == ("idle", False)
    assert info.participant.ended_at is not None


def test_an_arguments_lever_and_the_profiles_default_command(
    ctx: RepoContext, session: Session, started: Started
) -> None:
    p = started.prepare(session, "cline", "planner")
    assert p.argv == ["cline", "--data-dir", str(p.participant.root)]
    assert "not linked (no such file)" in p.notes[0] and "secrets.json" in p.notes[0]
    started.finish(p)
    again = started.prepare(session, None, "planner", ["cline", "task", "x"])
    assert again.argv == ["cline", "--data-dir", str(p.participant.root), "task", "x"]
    assert again.notes == []  # the same originals are missing: said once is enough


def test_a_home_lever_links_below_the_new_home(
    ctx: RepoContext, session: Session, started: Started, home: Path
) -> None:
    (home / ".gemini").mkdir()
    (home / ".gemini" / "oauth_creds.json").write_text("{}")
    (home / ".gitconfig").write_text("[user]\n\tname = T\n")
    p = started.prepare(session, "agy", "reviewer", ["gemini"])
    root = p.participant.root
    assert p.env["HOME"] == str(root)
    assert (root / ".gemini" / "oauth_creds.json").is_symlink()
    assert (root / ".gemini").is_dir() and not (root / ".gemini").is_symlink()
    assert (root / ".gitconfig").read_text().startswith("[user]")
    assert p.participant.kind == "agy"


def test_two_roles_of_one_cli_never_share_a_root(
    ctx: RepoContext, session: Session, started: Started
) -> None:
    a = started.prepare(session, "claude", "a")
    b = started.prepare(session, "claude", "b")
    assert a.participant.root != b.participant.root
    assert a.participant.isolation_uuid != b.participant.isolation_uuid


def test_two_roles_of_a_home_cli_share_no_xdg_dir(
    session: Session, started: Started, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user's XDG base directories, set: a tool that follows them would keep every role's
    # state in one place (they were passed on as they were).
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, str(home / name.lower()))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    a = started.prepare(session, "home", "a", ["tool"])
    b = started.prepare(session, "home", "b", ["tool"])
    for p in (a, b):
        assert p.env["HOME"] == str(p.participant.root)
        assert not {k for k in p.env if k.startswith("XDG_")} - {"XDG_RUNTIME_DIR"}
    assert a.env["XDG_RUNTIME_DIR"] == str(home / "run")
    # levers other than HOME leave them as they are (the CLI's own state is moved anyway)
    c = started.prepare(session, "claude", "c")
    assert c.env["XDG_STATE_HOME"] == str(home / "xdg_state_home")


def test_a_running_role_cannot_start_twice(
    ctx: RepoContext, session: Session, started: Started
) -> None:
    p = started.prepare(session, "claude", "a")
    with pytest.raises(GitsessError, match=rf"role a is already running .*\(pid {os.getpid()}\)"):
        agents.prepare(ctx, session, kind="claude", role="a", argv=[], env=os.environ)
    started.finish(p)
    started.finish(started.prepare(session, "claude", "a"))


def test_resuming_reapplies_the_row_and_links_new_originals(
    ctx: RepoContext, session: Session, started: Started, home: Path
) -> None:
    first = started.prepare(session, "codex", "w")
    assert "auth.json" in first.notes[0]
    (first.participant.root / "sessions").mkdir()
    started.finish(first)
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text("{}")
    again = started.prepare(session, None, "w")
    assert again.participant.isolation_uuid == first.participant.isolation_uuid
    assert (again.participant.root / "sessions").is_dir()
    assert again.env["CODEX_HOME"] == str(first.participant.root)
    assert (again.participant.root / "auth.json").is_symlink()
    assert "config.toml" in again.notes[0] and "auth.json" not in again.notes[0]


def test_a_role_keeps_its_kind_and_a_new_role_needs_one(
    ctx: RepoContext, session: Session, started: Started
) -> None:
    started.finish(started.prepare(session, "codex", "w"))
    with pytest.raises(GitsessError, match="role 'w' of session s is a codex agent, not claude"):
        agents.prepare(ctx, session, kind="claude", role="w", argv=[], env=os.environ)
    with pytest.raises(GitsessError, match="has no role 'x' yet; start it with --agent KIND"):
        agents.prepare(ctx, session, kind=None, role="x", argv=[], env=os.environ)
    with pytest.raises(GitsessError, match="invalid role"):
        agents.prepare(ctx, session, kind="claude", role="-x", argv=[], env=os.environ)


def test_stop_purges_the_root_and_leaves_the_originals(
    ctx: RepoContext,
    session: Session,
    started: Started,
    originals: Callable[[], Snapshot],
) -> None:
    before = originals()
    p = started.prepare(session, "claude", "a")
    with pytest.raises(GitsessError, match=rf"already running .*\(pid {os.getpid()}\)"):
        agents.stop(ctx, session, "a")
    started.finish(p)
    agents.stop(ctx, session, "a")
    assert not p.participant.root.exists()
    assert agents.list_participants(ctx, session) == []
    assert originals() == before
    with pytest.raises(GitsessError, match="has no role 'a'"):
        agents.stop(ctx, session, "a")


def test_rm_purges_the_sessions_roots(
    ctx: RepoContext,
    session: Session,
    started: Started,
    originals: Callable[[], Snapshot],
) -> None:
    before = originals()
    other = sessions.create(ctx, "other")
    mine = [started.prepare(session, kind, kind) for kind in ("claude", "cline")]
    theirs = started.prepare(other, "claude")
    for p in [*mine, theirs]:
        started.finish(p)
    sessions.remove(ctx, "s")
    assert [p.participant.root.exists() for p in mine] == [False, False]
    assert theirs.participant.root.is_dir()
    assert originals() == before


def test_rm_refuses_while_a_role_runs(ctx: RepoContext, session: Session, started: Started) -> None:
    p = started.prepare(session, "claude", "a")
    with pytest.raises(GitsessError, match="role a is already running"):
        sessions.remove(ctx, "s")
    assert p.participant.root.is_dir()
    assert sessions.info(ctx, "s").session.name == "s"


def test_gc_collects_orphaned_roots_only(
    ctx: RepoContext,
    session: Session,
    started: Started,
    originals: Callable[[], Snapshot],
) -> None:
    before = originals()
    owned = started.prepare(session, "claude", "a")
    started.finish(owned)
    homes = homes_dir(ctx.state_dir)
    orphan = homes / "0b8a2f5e-7d3c-4c1e-9a4b-2f6d8e0c1a3b"
    orphan.mkdir()
    os.symlink(Path(os.environ["HOME"]) / ".claude/.credentials.json", orphan / "c.json")
    (homes / "notes.txt").write_text("not a root")
    assert agents.collect_orphans(ctx, True) == [orphan]
    assert orphan.is_dir()
    assert agents.collect_orphans(ctx, False) == [orphan]
    assert not orphan.exists()
    assert owned.participant.root.is_dir() and (homes / "notes.txt").exists()
    assert agents.collect_orphans(ctx, False) == []
    assert originals() == before


def test_gc_without_any_root_creates_nothing(ctx: RepoContext) -> None:
    assert agents.collect_orphans(ctx, False) == []
    assert not ctx.state_dir.exists()


def test_exit_takes_in_a_token_the_agent_refreshed(
    ctx: RepoContext,
    session: Session,
    started: Started,
    originals: Callable[[], Snapshot],
    home: Path,
) -> None:
    originals()
    a = started.prepare(session, "claude", "a")
    b = started.prepare(session, "claude", "b")
    for p in (a, b):
        # Only the exit-time check is under test here.
        assert p.watcher is not None
        p.watcher.kill()
    credential = a.participant.root / ".credentials.json"
    tmp = credential.with_name(".tmp")
    tmp.write_text("claude-token-2")
    os.replace(tmp, credential)
    notes = started.finish(a)
    assert notes == [
        f"an agent refreshed {home / '.claude/.credentials.json'}: copied it back, linked"
        " again in 1 root(s)"
    ]
    assert (home / ".claude/.credentials.json").read_text() == "claude-token-2"
    assert credential.is_symlink()
    assert (b.participant.root / ".credentials.json").read_text() == "claude-token-2"
    started.finish(b)
