"""The session's real worktree (never from inside a session), its repository, and the
session's view over it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext, Repository, open_worktree
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount
from gitsess.services import live
from gitsess.store.registry import Session


def real_root(session: Session) -> Path:
    """The session's real worktree, refused inside a session: there the worktree's own path
    shows the view (`live.out_of_reach`)."""
    worktree = session.worktree
    if not worktree.is_dir():
        raise GitsessError(f"session {session.name} is bound to {worktree}, which no longer exists")
    if live.out_of_reach(session):
        raise GitsessError(
            f"{worktree} shows a session's view here, not the real worktree; "
            "run this outside the session"
        )
    return worktree


def open_real(session: Session, root: Path) -> Repository:
    """The session's worktree repository."""
    return open_worktree(root)


@contextmanager
def open_view(ctx: RepoContext, session: Session, root: Path) -> Iterator[OverlayView]:
    """The view over `root`, after the live daemon (if any) committed its state."""
    mount.sync(ctx.session_dir(session.id))
    view = OverlayView(
        ctx.session_dir(session.id) / "delta.db", root, live.hidden_paths(ctx, session)
    )
    try:
        yield view
    finally:
        view.close()
