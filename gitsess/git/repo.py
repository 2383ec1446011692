"""The repository through pygit2: opening it and its worktrees, HEAD, config, a few commit
questions; `Repository` and `GitError` are what the layers above hold of pygit2. Where gitsess
keeps its state is decided in `location.discover` alone (re-exported here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pygit2

from gitsess.errors import GitsessError
from gitsess.git.location import STATE_DIR_ENV, RepoContext, discover

__all__ = [
    "STATE_DIR_ENV",
    "GitError",
    "Head",
    "Person",
    "RepoContext",
    "Repository",
    "commits_behind",
    "common_dir",
    "config_value",
    "descends",
    "discover",
    "drop_ref",
    "git_dir",
    "has_branch",
    "head_of",
    "open_common",
    "open_worktree",
    "remote_names",
    "worktree_paths",
]

# libgit2 hashes every object it reads again to check it; git does not (only `fsck` and
# transfers check). Diff and apply read each changed file's old and new blobs, so the check
# was a second SHA-1 of every byte they showed: some 15 % of `gitsess diff` of 1,000 files.
pygit2.settings.enable_strict_hash_verification(False)

# The layers above hold a repository as a handle they pass back to functions of this layer,
# and catch this layer's error (libgit2's): neither imports pygit2 (tests/test_layers.py).
Repository: TypeAlias = pygit2.Repository
GitError = pygit2.GitError


def open_common(common_dir: Path) -> pygit2.Repository:
    """The repository through its common dir: refs, objects and the worktree list."""
    return pygit2.Repository(str(common_dir))


def worktree_paths(repo: pygit2.Repository) -> list[Path]:
    """Every worktree of the repository: the main one (unless bare), then the linked ones."""
    paths = [] if repo.is_bare else [Path(repo.workdir).resolve()]
    for name in repo.list_worktrees():
        paths.append(Path(repo.lookup_worktree(name).path).resolve())
    return paths


def open_worktree(path: Path) -> pygit2.Repository:
    """The repository as seen from one worktree: its HEAD, index and status."""
    try:
        return pygit2.Repository(str(path))
    except pygit2.GitError as e:
        raise GitsessError(f"worktree {path} is not usable: {e}") from e


@dataclass(frozen=True)
class Person:
    """Who a commit is by, as the layers above name it; the time is the commit's
    (git/objects.py makes the signature)."""

    name: str
    email: str


@dataclass(frozen=True)
class Head:
    """What a worktree has checked out. `branch` is None on a detached HEAD; `commit` is None on
    a branch that has no commit yet."""

    branch: str | None
    commit: str | None


def head_of(repo: pygit2.Repository) -> Head:
    if repo.head_is_detached:
        return Head(None, str(repo.head.target))
    ref = repo.references["HEAD"].target
    assert isinstance(ref, str)  # HEAD is symbolic unless detached
    branch = ref.removeprefix("refs/heads/")
    if repo.head_is_unborn:
        return Head(branch, None)
    return Head(branch, str(repo.head.target))


def git_dir(repo: pygit2.Repository) -> Path:
    """The worktree's own git directory (the common one for the main worktree)."""
    return Path(repo.path)


def config_value(repo: pygit2.Repository, key: str) -> str | None:
    """A setting of the repository's config (with the user's and system's); None if unset."""
    try:
        return str(repo.config[key])
    except KeyError:
        return None


def descends(repo: pygit2.Repository, commit: str, ancestor: str) -> bool:
    """Whether `ancestor` is a strict ancestor of `commit`."""
    return bool(repo.descendant_of(commit, ancestor))


def commits_behind(repo: pygit2.Repository, base: str, tip: str) -> int:
    """How many commits `tip` has that `base` lacks."""
    return int(repo.ahead_behind(base, tip)[1])


def remote_names(repo: pygit2.Repository) -> list[str]:
    return [n for n in repo.remotes.names() if n is not None]


def has_branch(repo: pygit2.Repository, name: str) -> bool:
    return repo.branches.local.get(name) is not None


def drop_ref(repo: pygit2.Repository, ref: str) -> None:
    """Delete `ref` if it exists: a ref of gitsess's own."""
    if ref in repo.references:
        repo.references.delete(ref)


def common_dir(repo: pygit2.Repository) -> Path:
    """The git directory shared by all worktrees (a linked worktree names it in `commondir`)."""
    git_dir = Path(repo.path)
    pointer = git_dir / "commondir"
    if pointer.is_file():
        return (git_dir / pointer.read_text().strip()).resolve()
    return git_dir.resolve()
