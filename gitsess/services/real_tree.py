"""The session's real worktree as this process can reach it (from inside a session too), its
repository, and the session's view over it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext, open_worktree
from gitsess.overlay import mounttable
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount
from gitsess.services import live
from gitsess.store.registry import Session


def real_root(session: Session) -> Path:
    """The session's real worktree as this process can reach it.

    Inside a session (`gitsess run`), a private mount namespace shows the view at the worktree's
    own path, so the real files are not there. The daemon of that session runs outside it: its
    root directory (`/proc/<pid>/root`) is the ordinary filesystem, real worktree included.
    """
    worktree = session.worktree
    if not worktree.is_dir():
        raise GitsessError(f"session {session.name} is bound to {worktree}, which no longer exists")
    if not mounttable.is_mount_point(worktree):
        return worktree
    inside = os.environ.get("GITSESS_SESSION_ID")
    status = mount.status(inside) if inside else None
    if status is None:
        raise GitsessError(
            f"{worktree} shows a session's view here, not the real worktree; "
            "run this outside the session"
        )
    return Path(f"/proc/{status.daemon_pid}/root") / worktree.relative_to("/")


class _ReachedWorktree(pygit2.Repository):
    """A worktree's repository whose files are at `root`, a path that reaches them through
    another process's root directory.

    libgit2 resolves a worktree path to its real path, which from inside a session is the view
    again; the git layer reads and writes real files only through `workdir`, so it says `root`.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.reached = f"{root}/"

    @property
    def workdir(self) -> str:  # type: ignore[override]
        return self.reached


def open_real(session: Session, root: Path) -> pygit2.Repository:
    """The session's worktree repository, its files read and written at `root`."""
    if root == session.worktree:
        return open_worktree(root)
    try:
        return _ReachedWorktree(root)
    except pygit2.GitError as e:
        raise GitsessError(f"worktree {session.worktree} is not usable: {e}") from e


@contextmanager
def open_view(ctx: RepoContext, session: Session, root: Path) -> Iterator[OverlayView]:
    """The view over `root`, after the live daemon (if any) committed its state."""
    mount.sync(session.id)
    view = OverlayView(
        ctx.session_dir(session.id) / "delta.db", root, live.hidden_paths(ctx, session)
    )
    try:
        yield view
    finally:
        view.close()
