from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import discover, head_of, open_worktree, worktree_paths
from tests.util import git


def test_main_worktree_from_a_subdirectory(repo: Path) -> None:
    ctx = discover(repo / "src", env={})
    assert ctx.common_dir == repo / ".git"
    assert ctx.state_dir == repo / ".git" / "gitsess"
    assert ctx.worktree == repo
    assert ctx.registry_path == repo / ".git" / "gitsess" / "sessions.db"


def test_linked_worktree_shares_the_common_dir(repo: Path, tmp_path: Path) -> None:
    git(repo, "worktree", "add", "-q", "-b", "feat", str(tmp_path / "wt"))
    ctx = discover(tmp_path / "wt", env={})
    assert ctx.common_dir == repo / ".git"
    assert ctx.state_dir == repo / ".git" / "gitsess"
    assert ctx.worktree == tmp_path / "wt"


def test_inside_the_git_dir_the_worktree_is_still_known(repo: Path) -> None:
    ctx = discover(repo / ".git" / "objects", env={})
    assert ctx.common_dir == repo / ".git"
    assert ctx.worktree == repo


def test_bare_repository_has_no_worktree(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    ctx = discover(tmp_path / "bare.git", env={})
    assert ctx.common_dir == tmp_path / "bare.git"
    assert ctx.worktree is None


def test_outside_any_repository(tmp_path: Path) -> None:
    with pytest.raises(GitsessError, match="not a git repository"):
        discover(tmp_path, env={})


def test_state_dir_override_in_the_default_layout_finds_the_repo_without_cwd(
    repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    ctx = discover(outside, env={"GITSESS_DIR": str(repo / ".git" / "gitsess")})
    assert ctx.common_dir == repo / ".git"
    assert ctx.state_dir == repo / ".git" / "gitsess"
    assert ctx.worktree is None


def test_state_dir_override_elsewhere_takes_the_repo_from_cwd(repo: Path, tmp_path: Path) -> None:
    ctx = discover(repo, env={"GITSESS_DIR": str(tmp_path / "state")})
    assert ctx.state_dir == tmp_path / "state"
    assert ctx.common_dir == repo / ".git"
    assert ctx.worktree == repo


def test_state_dir_override_with_no_repository_anywhere(tmp_path: Path) -> None:
    with pytest.raises(GitsessError, match="GITSESS_DIR"):
        discover(tmp_path, env={"GITSESS_DIR": str(tmp_path / "state")})


def test_worktree_paths_lists_main_then_linked(repo: Path, tmp_path: Path) -> None:
    git(repo, "worktree", "add", "-q", "-b", "feat", str(tmp_path / "wt"))
    assert worktree_paths(pygit2.Repository(str(repo))) == [repo, tmp_path / "wt"]


def test_head_on_a_branch_detached_and_unborn(repo: Path, tmp_path: Path) -> None:
    tip = git(repo, "rev-parse", "HEAD")
    assert head_of(open_worktree(repo)).branch == "main"
    assert head_of(open_worktree(repo)).commit == tip
    git(repo, "checkout", "-q", "--detach")
    assert (head_of(open_worktree(repo)).branch, head_of(open_worktree(repo)).commit) == (None, tip)
    git(tmp_path, "init", "-q", "-b", "trunk", "empty")
    unborn = head_of(open_worktree(tmp_path / "empty"))
    assert (unborn.branch, unborn.commit) == ("trunk", None)
