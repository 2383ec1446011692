"""Applying a session's changes --worktree: writing them into the real tree (with `merged`, the
result of a merge onto a moved HEAD). Nothing is written when any conflict is found."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import pygit2

from gitsess.git.changes import GIT_EXEC, GIT_LINK, ChangeSet, StateKind
from gitsess.git.conflicts import (
    Conflict,
    clean_for_merge,
    is_staged,
    unique_conflicts,
    worktree_conflicts,
)
from gitsess.git.merge import Merged
from gitsess.git.objects import blob_data, lookup_tree
from gitsess.git.view import SessionView
from gitsess.git.worktree_writes import (
    Target,
    current_umask,
    plan_writes,
    real_kind,
    session_target,
    workdir_of,
    write_aside,
    write_targets,
)


@dataclass(frozen=True)
class WorktreeResult:
    applied: tuple[str, ...]  # paths written into the real tree (drop them from the delta)
    skipped: tuple[str, ...]  # selected paths left as they are (directories holding others)
    conflicts: tuple[Conflict, ...]
    dry_run: bool
    # real directories whose entries this apply changed (so their mtime moved): a copy-up record
    # (`copied_from`) of one of them that stays in the session must be refreshed to its lstat
    changed_dirs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts


def apply_worktree(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    force: bool = False,
    dry_run: bool = False,
    merged: Merged | None = None,
    scratch: pygit2.Repository | None = None,
) -> WorktreeResult:
    """Write the changes into the real worktree of `repo` (creates, edits, deletes, modes,
    symlinks, type changes, directories).

    Refuses the whole apply, naming every path, when a real-tree path changed since the session
    copied it (or since `changes` was computed), or a path the session created exists in the
    real tree now (unless that real file is exactly what the index has: nothing is lost);
    `force` writes anyway. `merged` (`merge_onto_head`, blobs in `scratch`): the content of
    paths where the merge onto the worktree's HEAD is not the view's, and its conflicts.
    """
    root = workdir_of(repo)
    selected = list(changes.changes)
    if merged is not None and merged.conflicts:
        return WorktreeResult((), (), merged.conflicts, dry_run)
    over = merged.entries if merged is not None else {}
    targets = [
        _merged_target(scratch or repo, c.path, over[c.path])
        if c.path in over
        else session_target(view, c)
        for c in selected
    ]
    plan = plan_writes(root, targets)
    conflicts = list(plan.conflicts)
    if not force:
        found = worktree_conflicts(view, root, selected, lambda p: is_staged(repo, root, p))
        if merged is not None and merged.head_tree is not None:
            # A real file that is exactly the HEAD's was changed by the commits merged onto,
            # not by hand: the merge holds that change, and overwriting it loses nothing.
            head = lookup_tree(scratch or repo, merged.head_tree)
            by_path = {c.path: c for c in selected}
            found = [
                c
                for c in found
                if c.path not in by_path or not clean_for_merge(head, root, by_path[c.path])
            ]
        conflicts += found
    if conflicts:
        return WorktreeResult((), (), unique_conflicts(conflicts), dry_run)
    applied = tuple(t.path for t in plan.targets)
    changed_dirs = () if dry_run else write_targets(root, _read_first(root, plan.targets))
    return WorktreeResult(applied, plan.skipped, (), dry_run, changed_dirs)


def _merged_target(repo: pygit2.Repository, path: str, entry: tuple[str, int] | None) -> Target:
    if entry is None:
        return Target(path, None, 0, None)
    oid, mode = entry
    kind: StateKind = "symlink" if mode == GIT_LINK else "file"
    perm = (0o777 if mode == GIT_EXEC else 0o666) & ~current_umask()
    return Target(path, kind, perm, partial(blob_data, repo, pygit2.Oid(hex=oid)))


def _constant(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _read_first(root: Path, targets: Sequence[Target]) -> list[Target]:
    """The targets with every content the writes will need already read. The view reads what
    the session left unchanged from the real tree, which the removals change: a directory the
    session renamed still reads its files from the old real path, removed before the new one
    is written. Costs memory for every rewritten file at once, not one at a time, but for a
    big file: that one is written beside its path at once, to be renamed in."""
    base = f"{root}/"
    out = []
    for t in targets:
        read = t.content
        if read is not None and (t.rewrite or real_kind(base + t.path) != t.kind):
            parent = base + t.path.rpartition("/")[0]
            aside = None
            if t.big is not None and real_kind(parent) == "dir":
                aside = write_aside(base, t, t.big)
            if aside is not None:
                t = replace(t, content=None, big=None, aside=aside)
            else:
                t = replace(t, content=_constant(read()))
        out.append(t)
    return out
