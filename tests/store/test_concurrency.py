"""Many gitsess processes at once on one registry."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.util import GITSESS, git

PROCESSES = 8


def run_together(repo: Path, args: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Start every command before waiting for any, so they contend for the registry."""
    procs = [
        subprocess.Popen(
            [*GITSESS, *a],
            cwd=repo,
            env=os.environ.copy(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in args
    ]
    done = []
    for proc, a in zip(procs, args, strict=True):
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(a, proc.returncode, out, err))
    return done


def test_eight_processes_create_sessions_on_a_fresh_registry(repo: Path) -> None:
    # The registry does not exist yet: its creation and migration race too.
    done = run_together(repo, [["new", "--json"]] * PROCESSES)
    for d in done:
        assert d.returncode == 0, d.stderr
        assert "locked" not in d.stderr
    made = [json.loads(d.stdout) for d in done]
    assert len({m["name"] for m in made}) == PROCESSES
    assert len({m["id"] for m in made}) == PROCESSES
    assert sorted(m["seq"] for m in made) == list(range(1, PROCESSES + 1))
    listed = json.loads(subprocess.check_output([*GITSESS, "ls", "--json"], cwd=repo))
    assert len(listed) == PROCESSES


def test_eight_processes_racing_for_one_name_make_one_session(repo: Path) -> None:
    done = run_together(repo, [["new", "same"]] * PROCESSES)
    assert sorted(d.returncode for d in done) == [0] + [1] * (PROCESSES - 1)
    for d in done:
        assert d.returncode == 0 or "already exists" in d.stderr, d.stderr
    listed = json.loads(subprocess.check_output([*GITSESS, "ls", "--json"], cwd=repo))
    assert [s["name"] for s in listed] == ["same"]


def test_concurrent_worktree_sessions_get_their_own_worktrees(repo: Path) -> None:
    done = run_together(repo, [["new", "--worktree", "--json"]] * 4)
    for d in done:
        assert d.returncode == 0, d.stderr
    made = [json.loads(d.stdout) for d in done]
    assert len({m["worktree"] for m in made}) == 4
    listed = git(repo, "worktree", "list", "--porcelain")
    for m in made:
        assert f"worktree {m['worktree']}" in listed
        assert f"branch refs/heads/{m['branch']}" in listed
