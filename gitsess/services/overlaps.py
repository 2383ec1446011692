"""The conflict radar: which sessions on one branch changed the same paths, and whether a
three-way merge of the two (or of a session and the commits its branch got since its base)
would conflict.

Everything is computed in a scratch repository (`git/scratch.py`): the sessions' trees and the
merges live in memory and are dropped, so nothing is written (a blob over `BIG_FILE` is the
one exception, as for a diff: the scratch repository streams those to the object store, where
`git gc` prunes them unless a commit comes to use them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import pygit2
from pygit2.enums import FileMode

from gitsess.errors import GitsessError
from gitsess.git.apply_commit import branch_tip
from gitsess.git.changes import compute_changes
from gitsess.git.objects import store_view_blob, tree_entry
from gitsess.git.repo import RepoContext
from gitsess.git.scratch import ScratchRepository, scratch_repo
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


Entry = tuple[str, int] | None  # (blob id, git mode); None: absent


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
                ancestor = _tree(repo, _merge_base(repo, a.base, b.base))
                conflicts = _conflicts(
                    scratch, shared, _entries(ancestor, shared), a.entries, b.entries
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
    ctx: RepoContext, session: Session, repo: pygit2.Repository, scratch: ScratchRepository
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


def _tree(repo: pygit2.Repository, commit: str | None) -> pygit2.Tree | None:
    return None if commit is None else repo[commit].peel(pygit2.Tree)


def _merge_base(repo: pygit2.Repository, a: str | None, b: str | None) -> str | None:
    if a == b or a is None or b is None:
        return a if a == b else None
    base = repo.merge_base(a, b)
    return str(base) if base is not None else None


def _entries(tree: pygit2.Tree | None, paths: Sequence[str]) -> dict[str, Entry]:
    return {p: tree_entry(tree, p) if tree is not None else None for p in paths}


def _conflicts(
    scratch: pygit2.Repository,
    paths: Sequence[str],
    base: Mapping[str, Entry],
    ours: Mapping[str, Entry],
    theirs: Mapping[str, Entry],
) -> tuple[str, ...]:
    """Which of `paths` a three-way merge cannot merge. Only those paths are merged, each side
    a tree of them alone: a path's merge depends on its three versions, and trees of the whole
    worktree cost a tree write per directory of it, per session."""
    contested = [p for p in paths if ours[p] != theirs[p] and base[p] not in (ours[p], theirs[p])]
    if not contested:
        return ()
    ancestor, one, other = (
        _small_tree(scratch, {p: side[p] for p in contested}) for side in (base, ours, theirs)
    )
    index = scratch.merge_trees(ancestor, one, other)
    if index.conflicts is None:
        return ()
    return tuple(
        sorted({next(str(e.path) for e in entry if e is not None) for entry in index.conflicts})
    )


def _small_tree(scratch: pygit2.Repository, entries: Mapping[str, Entry]) -> pygit2.Oid:
    index = pygit2.Index()
    for path, entry in entries.items():
        if entry is not None:
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=entry[0]), FileMode(entry[1])))
    return index.write_tree(scratch)


def _branch_overlap(
    repo: pygit2.Repository, scratch: pygit2.Repository, side: _Side
) -> Overlap | None:
    """The session against the commits its branch got since the session's base."""
    branch = side.session.branch
    if branch is None or side.base is None:
        return None
    tip = branch_tip(repo, branch)
    if tip is None or tip == side.base:
        return None
    base_tree, tip_tree = _tree(repo, side.base), _tree(repo, tip)
    assert base_tree is not None and tip_tree is not None
    deltas = base_tree.diff_to_tree(tip_tree).deltas
    moved = {path for d in deltas for path in (d.old_file.path, d.new_file.path)}
    shared = sorted(side.entries.keys() & moved)
    if not shared:
        return None
    conflicts = _conflicts(
        scratch, shared, _entries(base_tree, shared), side.entries, _entries(tip_tree, shared)
    )
    return Overlap(side.session.name, branch, "branch", tuple(shared), conflicts)
