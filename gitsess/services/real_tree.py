"""The session's real worktree (never from inside a session) and its repository (the view
over it is `SessionHandle.view(root)`).

Inside a run the worktree's own path shows the view, and nothing there leads to the real files:
no outside process is visible, so no `/proc/<pid>/root` (`runtime/inplace.py`). So `real_root`
refuses there rather than find another way; the way it once had, through the daemon's
`/proc/<pid>/root`, was the way out of a run that issue 37 closed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gitsess.errors import GitsessError
from gitsess.services.counts import out_of_reach
from gitsess.services.handle import worktree_gone
from gitsess.store.registry import Session

if TYPE_CHECKING:  # (`show` asks `real_root` and needs no repository)
    from gitsess.git.repo import Repository


def real_root(session: Session) -> Path:
    """The session's real worktree, refused inside a session: there the worktree's own path
    shows the view (`counts.out_of_reach`)."""
    worktree = session.worktree
    if not worktree.is_dir():
        raise worktree_gone(session)
    if out_of_reach(session):
        raise GitsessError(
            f"{worktree} shows a session's view here, not the real worktree; "
            "run this outside the session"
        )
    return worktree


def open_real(session: Session, root: Path) -> Repository:
    """The session's worktree repository."""
    from gitsess.git.repo import open_worktree

    return open_worktree(root)
