"""The conflict radar: which sessions on one branch changed the same paths, and whether a
three-way merge of the two (or of a session and the commits its branch got since its base)
would conflict.

Everything is computed in a scratch repository (`git/scratch.py`): the sessions' trees and the
merges live in memory and are dropped, so nothing is written (a blob over `BIG_FILE` is the
one exception, as for a diff: the scratch repository streams those to the object store, where
`git gc` prunes them unless a commit comes to use them).

Sessions are grouped by worktree and branch. Each session with git-visible changes is a tree:
its base tree with its changed paths (`compute_changes` against the real worktree). Two
sessions that changed a path in common are merged over the merge base of their two bases; a
session is also merged with its branch's tip when the branch moved since its base and changed
one of its paths. `ls` marks the sessions that would conflict (`conflicting`), and `apply
--commit` names those the branch conflicts with once it landed (`gate.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from gitsess.errors import GitsessError
from gitsess.git.apply_commit import branch_tip
from gitsess.git.changes import compute_changes
from gitsess.git.objects import store_view_blob
from gitsess.git.repo import RepoContext, Repository
from gitsess.git.scratch import ScratchRepository, scratch_repo
from gitsess.git.trees import Entry, changed_between, conflicting_paths, entries_at, merge_base
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import open_real, real_root
from gitsess.services.sessions import list_sessions
from gitsess.store.registry import Session


@dataclass(frozen=True)
class Overlap:
    """Paths a session (`name`) and another session, or its branch's new commits, both
    changed; `conflicts` are those a three-way merge of the two could not merge."""

    name: str
    other: str  # the other session's name, or the branch (kind "branch")
    kind: Literal["session", "branch"]
    paths: tuple[str, ...]
    conflicts: tuple[str, ...]

    @property
    def conflict(self) -> bool:
        return bool(self.conflicts)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "other": self.other,
            "kind": self.kind,
            "paths": list(self.paths),
            "conflict": self.conflict,
            "conflicts": list(self.conflicts),
        }


@dataclass(frozen=True)
class _Side:
    """A session as the radar sees it: its base and the git state of each path it changed."""

    session: Session
    base: str | None
    entries: dict[str, Entry]


def overlaps(ctx: RepoContext, only: Iterable[str] = ()) -> list[Overlap]:
    """Every overlap among the repository's sessions with changes. With `only` (session ids),
    just the overlaps those sessions are part of. Sessions whose worktree is gone, or whose
    changes cannot be read, are left out."""
    wanted = set(only)
    groups: dict[tuple[str, str], list[Session]] = {}
    for info in list_sessions(ctx):
        s = info.session
        if info.worktree_exists and not info.damaged and info.changed_files != 0:
            key = (str(s.worktree), s.branch or f"detached {s.base_commit}")
            groups.setdefault(key, []).append(s)
    found: list[Overlap] = []
    for group in groups.values():
        if wanted and not wanted & {s.id for s in group}:
            continue
        found += _group_overlaps(ctx, group, wanted)
    return found


def conflicting(found: Sequence[Overlap]) -> dict[str, list[str]]:
    """For each session name, what it would conflict with (session names, or branches)."""
    out: dict[str, list[str]] = {}
    for o in found:
        if o.conflict:
            out.setdefault(o.name, []).append(o.other)
            if o.kind == "session":
                out.setdefault(o.other, []).append(o.name)
    return out


def _group_overlaps(ctx: RepoContext, group: list[Session], wanted: set[str]) -> list[Overlap]:
    repo = open_real(group[0], real_root(group[0]))
    found: list[Overlap] = []
    with scratch_repo(repo) as scratch:
        sides = [side for s in group if (side := _side(ctx, s, repo, scratch)) is not None]
        for a, b in combinations(sides, 2):
            if wanted and not wanted & {a.session.id, b.session.id}:
                continue
            shared = sorted(a.entries.keys() & b.entries.keys())
            if shared:
                ancestor = merge_base(repo, a.base, b.base)
                conflicts = conflicting_paths(
                    scratch, shared, entries_at(repo, ancestor, shared), a.entries, b.entries
                )
                found.append(
                    Overlap(a.session.name, b.session.name, "session", tuple(shared), conflicts)
                )
        for side in sides:
            if not wanted or side.session.id in wanted:
                branch = _branch_overlap(repo, scratch, side)
                if branch is not None:
                    found.append(branch)
    return found


def _side(
    ctx: RepoContext, session: Session, repo: Repository, scratch: ScratchRepository
) -> _Side | None:
    try:
        with SessionHandle(ctx, session).view(real_root(session)) as view:
            changes = compute_changes(view, repo, store=scratch)
            git_changes = changes.git_changes()
            if not git_changes:
                return None
            entries = {c.path: store_view_blob(scratch, view, c) for c in git_changes}
    except GitsessError:
        return None  # a damaged or unreachable session: `ls` and `show` say why
    return _Side(session, session.base_commit, entries)


def _branch_overlap(repo: Repository, scratch: Repository, side: _Side) -> Overlap | None:
    """The session against the commits its branch got since the session's base."""
    branch = side.session.branch
    if branch is None or side.base is None:
        return None
    tip = branch_tip(repo, branch)
    if tip is None or tip == side.base:
        return None
    shared = sorted(side.entries.keys() & changed_between(repo, side.base, tip))
    if not shared:
        return None
    conflicts = conflicting_paths(
        scratch, shared, entries_at(repo, side.base, shared), side.entries,
        entries_at(repo, tip, shared),
    )  # fmt: skip
    return Overlap(side.session.name, branch, "branch", tuple(shared), conflicts)
