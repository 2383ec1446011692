from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext, discover
from gitsess.git.worktree import WorktreeSpec
from gitsess.services import sessions
from tests.util import commit, git


def worktrees(repo: Path) -> dict[str, str]:
    """Worktree path -> checked-out branch, as git itself sees them."""
    found: dict[str, str] = {}
    path = ""
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line.startswith("branch "):
            found[path] = line.removeprefix("branch refs/heads/")
    return found


def branches(repo: Path) -> set[str]:
    return set(git(repo, "branch", "--format=%(refname:short)").splitlines())


def test_new_worktree_on_a_new_branch_is_a_real_git_worktree(ctx: RepoContext, repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    path = ctx.state_dir / "worktrees" / "side"
    assert s.worktree == path
    assert (s.branch, s.base_commit) == ("gitsess/side", head)
    assert s.created_worktree and s.created_branch
    assert worktrees(repo)[str(path)] == "gitsess/side"
    assert git(path, "rev-parse", "HEAD") == head
    assert git(path, "status", "--porcelain") == ""  # checked out and indexed
    assert (path / "src" / "app.py").read_text() == "print('hi')\n"
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert (repo / ".git" / "worktrees" / "gitsess-side").is_dir()


def test_named_branch_from_a_revision(ctx: RepoContext, repo: Path) -> None:
    first = git(repo, "rev-parse", "HEAD")
    commit(repo, "more.txt", "more\n")
    s = sessions.create(ctx, "old", worktree=WorktreeSpec("topic", "HEAD~1"))
    assert (s.branch, s.base_commit) == ("topic", first)
    assert git(repo, "rev-parse", "topic") == first
    assert not (s.worktree / "more.txt").exists()


def test_existing_branch_not_checked_out_is_used_as_is(ctx: RepoContext, repo: Path) -> None:
    git(repo, "branch", "ready")
    s = sessions.create(ctx, "r", worktree=WorktreeSpec("ready"))
    assert s.branch == "ready" and not s.created_branch and s.created_worktree
    sessions.remove(ctx, "r")
    assert "ready" in branches(repo)  # not ours to delete
    assert not s.worktree.exists()


def test_branch_checked_out_elsewhere_is_refused_and_nothing_changes(
    ctx: RepoContext, repo: Path
) -> None:
    with pytest.raises(GitsessError, match=f"branch main is already checked out at {repo}"):
        sessions.create(ctx, "m", worktree=WorktreeSpec("main"))
    assert set(worktrees(repo)) == {str(repo)}
    assert sessions.list_sessions(ctx) == []


def test_from_with_an_existing_branch_or_bad_revision(ctx: RepoContext, repo: Path) -> None:
    git(repo, "branch", "ready")
    with pytest.raises(GitsessError, match="--from only applies to a new one"):
        sessions.create(ctx, "a", worktree=WorktreeSpec("ready", "HEAD"))
    with pytest.raises(GitsessError, match="--from nope: no such commit"):
        sessions.create(ctx, "b", worktree=WorktreeSpec(None, "nope"))
    with pytest.raises(GitsessError, match="not a valid branch name"):
        sessions.create(ctx, "c", worktree=WorktreeSpec("bad..name"))
    assert branches(repo) == {"main", "ready"}
    assert set(worktrees(repo)) == {str(repo)}


def test_unborn_head_needs_a_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main", "empty")
    ctx = discover(tmp_path / "empty", env={})
    with pytest.raises(GitsessError, match="HEAD has no commit yet"):
        sessions.create(ctx, "x", worktree=WorktreeSpec())
    # Binding to the unborn branch itself is fine: there is simply no base commit yet.
    s = sessions.create(ctx, "y")
    assert (s.branch, s.base_commit) == ("main", None)


def test_duplicate_name_is_refused_before_any_worktree_is_made(
    ctx: RepoContext, repo: Path
) -> None:
    sessions.create(ctx, "dup")
    with pytest.raises(GitsessError, match="already exists"):
        sessions.create(ctx, "dup", worktree=WorktreeSpec())
    assert branches(repo) == {"main"}
    assert set(worktrees(repo)) == {str(repo)}


def test_worktree_from_a_bare_repository(tmp_path: Path, repo: Path) -> None:
    git(tmp_path, "clone", "-q", "--bare", str(repo), "bare.git")
    ctx = discover(tmp_path / "bare.git", env={})
    s = sessions.create(ctx, "w", worktree=WorktreeSpec())
    assert git(s.worktree, "rev-parse", "--abbrev-ref", "HEAD") == "gitsess/w"


def test_remove_takes_a_clean_merged_worktree_and_branch_with_it(
    ctx: RepoContext, repo: Path
) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    removal = sessions.remove(ctx, "side")
    assert removal.removed_worktree and removal.removed_branch and not removal.notes
    assert not s.worktree.exists()
    assert set(worktrees(repo)) == {str(repo)}
    assert branches(repo) == {"main"}
    assert not list((repo / ".git" / "worktrees").glob("gitsess-*"))  # admin entry pruned


def test_remove_keeps_a_branch_with_unmerged_commits(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    commit(s.worktree, "new.txt", "work\n")
    removal = sessions.remove(ctx, "side")
    assert not removal.removed_worktree
    assert "1 commit(s) on no other branch" in removal.notes[0]
    assert s.worktree.is_dir() and "gitsess/side" in branches(repo)
    assert sessions.list_sessions(ctx) == []


def test_merged_commits_do_not_keep_the_branch(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    commit(s.worktree, "new.txt", "work\n")
    git(repo, "merge", "-q", "--ff-only", "gitsess/side")
    assert sessions.remove(ctx, "side").removed_branch
    assert branches(repo) == {"main"}


def test_remove_keeps_a_worktree_with_uncommitted_changes(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    (s.worktree / "scratch.txt").write_text("unsaved\n")
    removal = sessions.remove(ctx, "side")
    assert not removal.removed_worktree
    assert "uncommitted changes" in removal.notes[0]
    assert (s.worktree / "scratch.txt").exists()


def test_force_removes_them_anyway(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    commit(s.worktree, "new.txt", "work\n")
    (s.worktree / "scratch.txt").write_text("unsaved\n")
    removal = sessions.remove(ctx, "side", force=True)
    assert removal.removed_worktree and removal.removed_branch
    assert not s.worktree.exists() and branches(repo) == {"main"}


def test_remove_when_the_worktree_was_deleted_by_hand(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "side", worktree=WorktreeSpec())
    shutil.rmtree(s.worktree)
    assert sessions.remove(ctx, "side").removed_branch
    assert set(worktrees(repo)) == {str(repo)}


def test_generated_names_avoid_kept_worktrees_and_branches(ctx: RepoContext, repo: Path) -> None:
    first = sessions.create(ctx, worktree=WorktreeSpec())
    commit(first.worktree, "keep.txt", "keep\n")
    sessions.remove(ctx, first.name)  # kept: the branch has a commit of its own
    second = sessions.create(ctx, worktree=WorktreeSpec())
    assert second.name != first.name
    assert second.worktree != first.worktree
