"""Finding the repository, its common dir, its worktrees, and where gitsess keeps its state."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitsess.errors import GitsessError

STATE_DIR_ENV = "GITSESS_DIR"

# libgit2 hashes every object it reads again to check it; git does not (only `fsck` and
# transfers check). Diff and apply read each changed file's old and new blobs, so the check
# was a second SHA-1 of every byte they showed: some 15 % of `gitsess diff` of 1,000 files.
pygit2.settings.enable_strict_hash_verification(False)


@dataclass(frozen=True)
class RepoContext:
    """Where one gitsess invocation stands.

    `common_dir` is the git directory shared by all worktrees of the repository (`.git` of the
    main worktree, or the bare repository). `worktree` is the worktree holding the current
    directory, None when there is none (a bare repository, or a state dir reached through
    `GITSESS_DIR` from outside any worktree).
    """

    common_dir: Path
    state_dir: Path
    worktree: Path | None

    @property
    def registry_path(self) -> Path:
        return self.state_dir / "sessions.db"

    @property
    def sessions_dir(self) -> Path:
        return self.state_dir / "sessions"

    @property
    def worktrees_dir(self) -> Path:
        return self.state_dir / "worktrees"

    def session_dir(self, session_id: str) -> Path:
        return self.sessions_dir / session_id

    def open(self) -> pygit2.Repository:
        """The repository through its common dir: refs, objects and the worktree list."""
        return pygit2.Repository(str(self.common_dir))


def discover(cwd: Path | None = None, env: Mapping[str, str] | None = None) -> RepoContext:
    """The context for a command run in `cwd` with environment `env` (default: the process's).

    `GITSESS_DIR`, when set, is the state dir, whatever the current directory says: inside a
    session the directory tree (and so the `.git` found by discovery) is served by the overlay,
    and the registry must never be reached through it. The repository is then the git dir that
    holds the state dir (the default layout), else the one found from the current directory.
    """
    cwd = Path.cwd() if cwd is None else cwd
    env = os.environ if env is None else env
    override = env.get(STATE_DIR_ENV)
    found = _discover_from(cwd)
    if override:
        state_dir = Path(override).absolute()
        owner = _open_git_dir(state_dir.parent)
        if owner is not None:
            common = common_dir(owner)
        elif found is not None:
            common = common_dir(found)
        elif (state_dir / "sessions.db").is_file():
            # inside a session whose own `.git` was removed: the state dir still says where
            common = state_dir.parent
        else:
            raise GitsessError(
                f"{STATE_DIR_ENV}={override} is not inside a git directory and "
                f"{cwd} is not in a git repository"
            )
        return RepoContext(common, state_dir, _worktree_of(found))
    if found is None:
        raise GitsessError(f"not a git repository (or any parent up to /): {cwd}")
    common = common_dir(found)
    return RepoContext(common, common / "gitsess", _worktree_of(found))


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


def _discover_from(cwd: Path) -> pygit2.Repository | None:
    try:
        git_dir = pygit2.discover_repository(str(cwd))
    except pygit2.GitError as e:
        raise GitsessError(f"cannot read the git repository around {cwd}: {e}") from e
    if git_dir is None:
        return None
    try:
        return pygit2.Repository(git_dir)
    except pygit2.GitError as e:
        raise GitsessError(f"cannot open the git repository {git_dir}: {e}") from e


def _open_git_dir(path: Path) -> pygit2.Repository | None:
    """The repository whose git dir is exactly `path`, if it is one."""
    if not (path / "HEAD").is_file():
        return None
    try:
        repo = pygit2.Repository(str(path), pygit2.enums.RepositoryOpenFlag.NO_SEARCH)
    except pygit2.GitError:
        return None
    return repo if Path(repo.path).resolve() == path.resolve() else None


def common_dir(repo: pygit2.Repository) -> Path:
    """The git directory shared by all worktrees (a linked worktree names it in `commondir`)."""
    git_dir = Path(repo.path)
    pointer = git_dir / "commondir"
    if pointer.is_file():
        return (git_dir / pointer.read_text().strip()).resolve()
    return git_dir.resolve()


def _worktree_of(repo: pygit2.Repository | None) -> Path | None:
    if repo is None or repo.is_bare or repo.workdir is None:
        return None
    return Path(repo.workdir).resolve()
