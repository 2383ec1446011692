"""Finding the repository around a directory, and where gitsess keeps its state, without
pygit2: a command that only reads gitsess's own files (`ls`, `show`, `kv`) should not pay
pygit2's import, which took longer than such a command's own work.

The search is git's: up from the directory, the first `.git` (a directory, or a file naming
one, as a linked worktree's does) or a directory that is itself a git directory (bare).

`discover` is the only place that decides where state lives: `<common-dir>/gitsess`, unless
`GITSESS_DIR` is set. That is authoritative: inside a session the tree, and so the `.git` the
search would find, is the view, and the registry must never be reached through it; the
repository is then the git dir holding the state dir, else the one found from the directory.
`RepoContext.worktree` is the worktree holding the directory, or None (bare, or outside one).
A session's view mounted outside a run (`gitsess mount DIR`) names no state dir: a command
there is refused, with the repository to run it in.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitsess.errors import GitsessError

if TYPE_CHECKING:
    import pygit2

STATE_DIR_ENV = "GITSESS_DIR"


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
        from gitsess.git.repo import open_common

        return open_common(self.common_dir)


@dataclass(frozen=True)
class Found:
    """A git directory, and the worktree it belongs to (None: bare)."""

    git_dir: Path
    worktree: Path | None


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
    found = find(cwd)
    worktree = None if found is None else found.worktree
    if override:
        state_dir = Path(override).absolute()
        if is_git_dir(state_dir.parent):
            common = common_dir_of(state_dir.parent)
        elif found is not None:
            common = common_dir_of(found.git_dir)
        elif (state_dir / "sessions.db").is_file():
            # inside a session whose own `.git` was removed: the state dir still says where
            common = state_dir.parent
        else:
            raise GitsessError(
                f"{STATE_DIR_ENV}={override} is not inside a git directory and "
                f"{cwd} is not in a git repository"
            )
        return RepoContext(common, state_dir, worktree)
    if found is None:
        raise GitsessError(f"not a git repository (or any parent up to /): {cwd}")
    common = common_dir_of(found.git_dir)
    _refuse_a_view(common, cwd)
    return RepoContext(common, common / "gitsess", worktree)


def _refuse_a_view(common: Path, cwd: Path) -> None:
    """`cwd` in a session's view outside a run (`gitsess mount DIR`, where nothing in the
    environment names the state dir): the `.git` found is the session's, which has no state
    dir, so commands said there were no sessions, or failed to make one. Its objects are a link
    into the session's dir, `<state dir>/sessions/<id>/objects`, which tells where to go."""
    objects = common / "objects"
    if not objects.is_symlink():
        return
    store = objects.parent / os.readlink(objects)
    state = store.parent.parent.parent
    if store.parent.parent.name != "sessions" or not (state / "sessions.db").is_file():
        return
    real = state.parent.parent if state.parent.name == ".git" else state.parent
    raise GitsessError(
        f"{cwd} is in a gitsess session's view, which has no sessions of its own: run gitsess "
        f"in the repository itself ({real})"
    )


def find(cwd: Path) -> Found | None:
    """The repository `cwd` is in, as git (and libgit2) find it: the search stops at a
    filesystem boundary."""
    start = Path(os.path.realpath(cwd))
    try:
        device = os.stat(start).st_dev
        for d in (start, *start.parents):
            if os.stat(d).st_dev != device:
                return None
            dotgit = d / ".git"
            if dotgit.is_dir() and is_git_dir(dotgit):
                return Found(dotgit, d)
            if dotgit.is_file():
                git_dir = _gitdir_file(dotgit)
                if git_dir is not None and is_git_dir(git_dir):
                    return Found(git_dir, d)
            if is_git_dir(d):
                return Found(d, None if _bare(d) or d.name != ".git" else d.parent)
    except OSError as e:
        raise GitsessError(f"cannot read the git repository around {cwd}: {e.strerror}") from e
    return None


def is_git_dir(path: Path) -> bool:
    """Whether `path` is a git directory: a HEAD, and objects and refs (a linked worktree's
    git directory has a `commondir` pointer instead)."""
    if not (path / "HEAD").is_file():
        return False
    return (path / "commondir").is_file() or (
        (path / "objects").is_dir() and (path / "refs").is_dir()
    )


def common_dir_of(git_dir: Path) -> Path:
    """The git directory shared by all worktrees (a linked worktree names it in `commondir`)."""
    pointer = git_dir / "commondir"
    if pointer.is_file():
        return (git_dir / pointer.read_text().strip()).resolve()
    return git_dir.resolve()


def _gitdir_file(dotgit: Path) -> Path | None:
    text = dotgit.read_text(errors="surrogateescape").strip()
    if not text.startswith("gitdir:"):
        return None
    return (dotgit.parent / text.removeprefix("gitdir:").strip()).resolve()


_BARE = re.compile(r"^\s*bare\s*=\s*(true|yes|on|1)\s*$", re.IGNORECASE | re.MULTILINE)
_SECTION = re.compile(r"^\s*\[([^\]]*)\]", re.MULTILINE)


def _bare(git_dir: Path) -> bool:
    """`core.bare` of the repository's own config."""
    try:
        text = (git_dir / "config").read_text(errors="surrogateescape")
    except FileNotFoundError:
        return False
    sections = _SECTION.split(text)
    # split gives [before, name, body, name, body, ...]
    return any(
        name.strip().lower() == "core" and _BARE.search(body) is not None
        for name, body in zip(sections[1::2], sections[2::2], strict=True)
    )


def read_ref(common_dir: Path, ref: str) -> str | None:
    """The commit a ref (such as refs/heads/main) names, read from its loose file or from
    packed-refs; None when neither has it (or it is symbolic)."""
    try:
        text = (common_dir / ref).read_text().strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        text = ""
    if text:
        return None if text.startswith("ref:") else text
    try:
        packed = (common_dir / "packed-refs").read_text()
    except FileNotFoundError:
        return None
    for line in packed.splitlines():
        commit, _, name = line.partition(" ")
        if name == ref and not line.startswith(("#", "^")):
            return commit
    return None
