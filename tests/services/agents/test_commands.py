"""The agent commands as a user types them: agents, stop, gc, run's agent errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from gitsess.cli.group import cli
from gitsess.git.repo import RepoContext
from gitsess.services import agents, sessions
from gitsess.services.agents.roots import homes_dir
from tests.util import gitsess


def ok(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def roles(ctx: RepoContext) -> dict[str, Path]:
    """Session s with an idle claude role `a` and cline role `b`; their roots."""
    session = sessions.create(ctx, "s")
    sessions.create(ctx, "other")
    made = {}
    for kind, role in (("claude", "a"), ("cline", "b")):
        p = agents.prepare(ctx, session, kind=kind, role=role, argv=[], env=os.environ)
        agents.finish(ctx, p)
        made[role] = p.participant.root
    return made


def test_agents_without_any_session_creates_nothing(ctx: RepoContext) -> None:
    assert "No agent roles yet." in ok("agents").output
    assert json.loads(ok("agents", "--json").output) == []
    assert not ctx.state_dir.exists()


def test_agents_lists_the_roles(roles: dict[str, Path]) -> None:
    out = ok("agents").output
    for text in ("SESSION", "a", "claude", "CLAUDE_CONFIG_DIR=<root>", "--data-dir <root>"):
        assert text in out
    assert "idle" in out and "3 missing" in out
    rows = json.loads(ok("agents", "s", "--json").output)
    assert [(r["name"], r["role"], r["kind"], r["status"]) for r in rows] == [
        ("s", "a", "claude", "idle"),
        ("s", "b", "cline", "idle"),
    ]
    assert rows[0]["root"] == str(roles["a"])
    assert rows[0]["lever"] == {"env": "CLAUDE_CONFIG_DIR"}
    assert rows[1]["lever"] == {"args": ["--data-dir", "{root}"]}
    assert {s["status"] for s in rows[0]["seeded"]} == {"missing"}
    assert "Session other has no agent roles." in ok("agents", "other").output


def test_stop_says_what_it_removed(roles: dict[str, Path]) -> None:
    out = ok("stop", "-s", "s", "--role", "a").output
    assert f"Stopped role a of session s; removed {roles['a']}" in out
    assert not roles["a"].exists() and roles["b"].is_dir()


def test_gc_lists_and_removes_orphans(ctx: RepoContext, roles: dict[str, Path]) -> None:
    orphan = homes_dir(ctx.state_dir) / "0b8a2f5e-7d3c-4c1e-9a4b-2f6d8e0c1a3b"
    orphan.mkdir()
    assert f"Would remove orphaned agent root {orphan}" in ok("gc", "--dry-run").output
    assert orphan.is_dir()
    assert f"Removed orphaned agent root {orphan}" in ok("gc").output
    assert not orphan.exists() and roles["a"].is_dir()
    assert "Nothing to collect." in ok("gc").output


def test_agent_errors_are_one_line(repo: Path, roles: dict[str, Path]) -> None:
    done = gitsess(repo, "run", "-s", "s", "--role", "zz", "--", "true")
    assert (done.returncode, done.stderr) == (
        1,
        "gitsess: session s has no role 'zz' yet; start it with --agent KIND\n",
    )
    done = gitsess(repo, "stop", "s", "--role", "zz")
    assert (done.returncode, done.stderr) == (1, "gitsess: session s has no role 'zz'\n")
    done = gitsess(repo, "stop", "s")
    assert done.returncode == 2 and "Missing option '--role'" in done.stderr
