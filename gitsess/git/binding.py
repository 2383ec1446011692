"""What binds a session to a worktree and branch, as data (the git work is in `worktree`):
the commands that only list sessions import this without pygit2."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gitsess.errors import GitsessError


@dataclass(frozen=True)
class WorktreeSpec:
    """`--worktree [BRANCH] [--from REV]`: a new worktree on BRANCH (default gitsess/<name>).

    An existing branch that no worktree has checked out is used as it is; otherwise the branch
    is created at REV (default: the current worktree's HEAD).
    """

    branch: str | None = None
    from_rev: str | None = None


@dataclass(frozen=True)
class Binding:
    """The worktree and branch a session works on, and what gitsess made for it."""

    worktree: Path
    branch: str | None
    base_commit: str | None
    created_worktree: bool
    created_branch: bool


class NameInUse(GitsessError):
    """The worktree path or the default branch for this session name is already taken."""
