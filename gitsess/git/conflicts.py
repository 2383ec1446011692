"""Conflicts with the real tree: what changed there since the session copied it (`Conflict`,
`worktree_conflicts`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitsess.git.blobid import blob_id, file_blob_id
from gitsess.git.changes import GIT_EXEC, GIT_LINK, Change, Side
from gitsess.git.objects import tree_entry
from gitsess.git.view import Entry, Kind, SessionView


@dataclass(frozen=True)
class Conflict:
    """Why one path stops an apply.

    reasons: `worktree-changed` (the real file changed since the session copied it, or since
    the change set was computed), `worktree-exists` (the session created a path the real tree
    now has too), `parent-changed` (the directory holding a path the session deleted changed in
    the real tree), `not-empty` (a directory would have to go but holds paths this apply leaves
    alone), `merge` (the moved branch tip and the session changed the path incompatibly),
    `local-change` (the merge must rewrite a real file that has its own uncommitted change),
    `not-a-directory` (a path to create lies below a real file that this apply leaves alone),
    `checked-out-elsewhere` (the branch is checked out in another worktree).
    """

    path: str
    reason: str
    detail: str


def clean_for_merge(tip_tree: pygit2.Tree, root: Path, change: Change) -> bool:
    """A real path that is exactly the tip's (committed, no local edit) can be overwritten with
    the merge result whatever happened to it since the copy-up: the merge holds the tip."""
    if not change.git_visible:
        return False
    return real_git_entry(root, change.path) == tree_entry(tip_tree, change.path)


def real_git_entry(root: Path, path: str) -> tuple[str, int] | None:
    full = root / path
    try:
        st = full.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return str(blob_id(os.fsencode(full.readlink()))), GIT_LINK
    if stat.S_ISREG(st.st_mode):
        mode = GIT_EXEC if st.st_mode & stat.S_IXUSR else 0o100644
        return str(file_blob_id(str(full))), mode
    return None


def worktree_conflicts(
    view: SessionView,
    root: Path,
    changes: Sequence[Change],
    staged: Callable[[str], bool] = lambda path: False,
) -> list[Conflict]:
    """Paths whose real state is not what the session's change was made against.

    A recorded copy-up (`copied_from`) must match the real file's lstat now; a path the session
    created must still be absent, unless `staged` says the real file there is safe in git; a
    deleted path with no record of its own is checked through the nearest recorded parent
    directory. And every path must still be as `compute_changes` saw it.
    """
    conflicts: list[Conflict] = []
    for change in changes:
        conflict = _conflict_for(view, root, change, staged)
        if conflict is not None:
            conflicts.append(conflict)
    return conflicts


def _conflict_for(
    view: SessionView, root: Path, change: Change, staged: Callable[[str], bool]
) -> Conflict | None:
    now = lstat_entry(f"{root}/{change.path}")  # a Path per file costs more than its lstat
    seen = entry_of(change.old) if change.old is not None else None
    if not same_stat(now, seen):
        return Conflict(change.path, "worktree-changed", "changed in the real tree meanwhile")
    record = view.copied_from(change.path)
    if record is not None:
        # nothing real to lose when the path is absent (and the overlay reports the origin of
        # a renamed file as the record of its new name, which the real tree never had)
        if now is not None and not same_stat(now, record):
            return Conflict(
                change.path,
                "worktree-changed",
                "changed in the real tree since the session copied it",
            )
        return None
    if change.old is None:
        return None
    if change.new is None:
        parent = _parent_conflict(view, root, change.path)
        if parent is not None or change.old.kind == "dir":
            return parent  # a directory's files are changes of their own
        return _removal_conflict(view, root, change, staged)
    # The overlay keeps no record for a file the session deleted and then wrote anew, so
    # "created" may well be "replaced": a real file identical to its index entry loses
    # nothing when overwritten.
    if staged(change.path):
        return None
    return Conflict(change.path, "worktree-exists", "created in the session and in the real tree")


def _removal_conflict(
    view: SessionView, root: Path, change: Change, staged: Callable[[str], bool]
) -> Conflict | None:
    """A real file the session removed with no record of what it removed: removing it loses
    nothing when git holds it as it is, or when it is older than the session's removal."""
    if staged(change.path):
        return None
    removed = view.removed_at(change.path)
    with suppress(OSError):
        if removed is not None and os.lstat(f"{root}/{change.path}").st_ctime_ns <= removed:
            return None
    return Conflict(
        change.path,
        "worktree-changed",
        "removed in the session, but the real file may have changed since (git does not hold"
        " it as it is)",
    )


def is_staged(repo: pygit2.Repository, root: Path, path: str) -> bool:
    """Whether the real file or symlink at `path` is exactly its entry in the index."""
    try:
        entry = repo.index[path]
    except KeyError:
        return False
    return real_git_entry(root, path) == (str(entry.id), int(entry.mode))


def _parent_conflict(view: SessionView, root: Path, path: str) -> Conflict | None:
    parent = path.rpartition("/")[0]
    while parent:
        record = view.copied_from(parent)
        if record is not None:
            if same_stat(lstat_entry(root / parent), record):
                return None
            return Conflict(path, "parent-changed", f"{parent} changed in the real tree")
        parent = parent.rpartition("/")[0]
    return None


def entry_of(state: Side) -> Entry:
    return Entry(state.kind, state.mode, state.size, state.mtime_ns)


def lstat_entry(path: str | Path) -> Entry | None:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(st.st_mode):
        kind: Kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return Entry(kind, st.st_mode, st.st_size, st.st_mtime_ns)


def same_stat(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.kind, a.mode, a.mtime_ns) == (b.kind, b.mode, b.mtime_ns) and (
        a.kind == "dir" or a.size == b.size  # a directory's size says nothing about its entries
    )


def unique_conflicts(conflicts: Iterable[Conflict]) -> tuple[Conflict, ...]:
    seen: dict[str, Conflict] = {}
    for conflict in conflicts:
        seen.setdefault(conflict.path, conflict)
    return tuple(sorted(seen.values(), key=lambda c: c.path))
