from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pygit2

from gitsess.services import tour
from tests.util import GITSESS


def test_the_tour_runs_every_step_and_leaves_nothing_behind(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [*GITSESS, "tour"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for step in tour.STEPS:
        if step.args:
            assert "$ " + shlex.join(["gitsess", *step.args]) in done.stdout
    assert re.search(r"\bsed[0-9A-Za-z]{6}\b", done.stdout) is None  # no sed temporary files
    assert "\\x" not in done.stdout  # its own line breaks printed as such, not escaped
    assert "\nThat is the tour." in done.stdout
    assert "Forked session demo into other-idea" in done.stdout
    assert "Discarded" in done.stdout and "1 commit(s)" in done.stdout
    assert "Unmounted session demo" in done.stdout
    assert "Created session idea" in done.stdout
    assert "Removed worktree" in done.stdout
    assert "+    return text.splitlines()" in done.stdout  # the session's diff
    assert "1 commit fast-forwarded, 1 new commit with 1 path" in done.stdout
    assert "is back at checkpoint" in done.stdout  # the bad run undone
    assert "left and right both changed 1 path(s): README.md; would conflict on README.md" in (
        done.stdout
    )
    assert "test passed: grep -q 'left wins' README.md" in done.stderr
    assert "the branch now conflicts with session(s): right" in done.stderr
    assert "Serve gitsess's tools to an agent over MCP" in done.stdout
    assert list(tmp_path.iterdir()) == []  # the demo repository is gone
    # The tour keeps its sessions out of the user's own index.
    assert not Path(os.environ["XDG_STATE_HOME"], "gitsess").exists()


def test_demo_repository_has_one_commit_on_main(tmp_path: Path) -> None:
    repo = pygit2.Repository(str(tour.make_demo_repo(tmp_path / "demo")))
    assert repo.head.shorthand == "main"
    assert repo[repo.head.target].peel(pygit2.Commit).parents == []
    assert not repo.status()
