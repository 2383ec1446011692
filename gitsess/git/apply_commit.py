"""Applying a session's changes --commit: into a commit on a branch.

Takes the `ChangeSet` from `compute_changes` (already filtered by pathspecs and ignore rules) and
returns a `CommitResult`; prints nothing. Nothing is changed when any conflict is found, and
`dry_run` finds the same conflicts while changing nothing at all.

The session's tree is the base commit's tree with the changed paths set to the view's
state. When the branch tip moved away from the base, libgit2 merges three ways (ancestor: the
base). For a path whose real file equals the tip's version and was not changed in the real tree
since the session copied it, the session's edit was made on top of the tip's version, so that
version is the ancestor instead (no spurious conflict when the checked-out worktree followed the
tip). All objects are built in a scratch object database first and copied into the repository
only when the merge is clean; then the worktree files, the index, and last the branch ref move.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, Literal

import pygit2
from pygit2.enums import FileMode

from gitsess.errors import GitsessError
from gitsess.git.changes import ChangeSet, StateKind
from gitsess.git.cleaning import Cleaner
from gitsess.git.conflicts import (
    Conflict,
    clean_for_merge,
    real_git_entry,
    unique_conflicts,
    worktree_conflicts,
)
from gitsess.git.merge import CommitBuild, build_commit_tree
from gitsess.git.objects import (
    as_signature,
    blob_data,
    commit_tree,
    copy_objects,
    lookup_tree,
    signature,
    tree_entry,
    worktree_bytes,
)
from gitsess.git.patch import carried_by_git, left_out_by_git
from gitsess.git.reflock import IndexLock, Moved, RefLock
from gitsess.git.repo import Person, common_dir
from gitsess.git.scratch import BIG_FILE, BigFile, ScratchRepository, scratch_repo
from gitsess.git.view import SessionView
from gitsess.git.worktree import checked_out_at
from gitsess.git.worktree_writes import (
    Target,
    plan_writes,
    session_target,
    tree_target,
    workdir_of,
    write_targets,
)


class Unread(Enum):
    """`apply_commit`'s `tip` when the caller did not read it."""

    UNREAD = 0


@dataclass(frozen=True)
class PathWrite:
    """One real-tree path a commit apply brings to the commit: its kind (None: removed) and
    permission bits. A file's or link's content is the commit tree's blob at that path."""

    path: str
    kind: StateKind | None
    perm: int
    rewrite: bool = True  # False: the content is already there, only the mode changes


@dataclass(frozen=True)
class CommitResult:
    branch: str  # full ref name
    parent: str | None  # the branch tip the commit was built on (None: unborn branch)
    base: str | None  # the session's base commit
    commit: str | None  # the new commit; None when nothing was committed
    tree: str | None
    merged: bool  # the tip had moved since the base: a three-way merge was made
    applied: tuple[str, ...]  # session paths now in the commit (drop them from the delta)
    skipped: tuple[str, ...]  # selected paths left out (see `worktree_updated`)
    conflicts: tuple[Conflict, ...]
    worktree_updated: bool  # the branch is checked out in the bound worktree: files + index
    updated: tuple[PathWrite, ...]  # real-tree writes (session paths and merge results)
    dry_run: bool
    changed_dirs: tuple[str, ...] = ()  # as in WorktreeResult
    new_branch: bool = False  # the branch did not exist: `parent` is where it starts
    # The branch tip the ref moves from, when the commit was built on another commit (the
    # session's own commits, replayed replayed_tip the tip): None means `parent`.
    moves_from: str | None = None

    @property
    def expected_tip(self) -> str | None:
        return self.parent if self.moves_from is None else self.moves_from

    @property
    def ok(self) -> bool:
        return not self.conflicts

    @property
    def updated_paths(self) -> tuple[str, ...]:
        return tuple(w.path for w in self.updated)

    def to_json(self) -> dict[str, Any]:
        """Plain data (for a journal, or `--json`); `from_json` reads it back.

        Built field by field: `asdict` deep-copies every value, some 6 ms for 1,000 paths."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["updated"] = [dict(vars(w)) for w in self.updated]
        data["conflicts"] = [dict(vars(c)) for c in self.conflicts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommitResult:
        values = dict(data)
        values["updated"] = tuple(PathWrite(**w) for w in data["updated"])
        values["conflicts"] = tuple(Conflict(**c) for c in data["conflicts"])
        for name in ("applied", "skipped", "changed_dirs"):
            values[name] = tuple(data[name])
        return cls(**values)


def apply_commit(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    branch: str,
    base: str | None,
    message: str,
    author: Person | pygit2.Signature | None = None,
    committer: pygit2.Signature | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_prepared: Callable[[CommitResult], None] | None = None,
    scratch: ScratchRepository | None = None,
    replayed_tip: str | None = None,
    reverted: Mapping[str, tuple[str, int] | None] | None = None,
    tip: str | Literal[Unread.UNREAD] | None = Unread.UNREAD,
) -> CommitResult:
    """Commit the changes on `branch` (a name or a full ref) on top of its tip; a branch that
    does not exist is created at `base`.

    `repo` is opened on the session's bound worktree; `base` is the commit the session started
    from (None: the tip). When the branch is checked out in that worktree, its files and index
    are brought to the commit for every applied path (so `git status` is clean for them), with
    the same conflict checks as `apply_worktree` (`force` skips those). The branch ref moves
    last, compare-and-swap against the tip read at the start. `on_prepared` is called with the
    final result once the commit object exists and before anything visible changes: the place
    to journal the apply so a crash can be completed with `finish_commit`. `scratch` is the
    scratch repository `changes` was computed with (its `store`), if any; else one is made.

    `replayed_tip` is where the session's own commits now end on this branch
    (`replay_commits`): the changes are committed on top of it, with `base` the session's HEAD,
    and the ref moves from its tip to the result (to `replayed_tip` itself when there is
    nothing more). `reverted` gives base entries for paths the session's commits changed that
    the view shows as the worktree has them: no change of the delta's, yet the commit must not
    keep the session commit's version. `tip` is the branch's tip as the caller read it to build
    `replayed_tip` (None: no such branch): read once, it is the value the ref is swapped
    against.
    """
    if not message.strip():
        raise GitsessError("a commit needs a message")
    # Before any work: without them, the objects copied in would be for nothing.
    author = as_signature(repo, author, "AUTHOR")
    committer = committer or signature(repo, "COMMITTER")
    ref = _branch_ref(branch)
    tip = _ref_target(repo, ref) if tip is Unread.UNREAD else tip
    # a branch that does not exist yet starts at the session's base
    new_branch = tip is None and base is not None
    tip = tip or base
    base = base or tip
    mode = _worktree_mode(repo, ref)
    bound = mode == "bound"
    moves_from = (
        tip if replayed_tip is not None and replayed_tip != tip and not new_branch else None
    )
    start = replayed_tip if replayed_tip is not None else tip
    result = CommitResult(
        ref, start, base, None, None, False, (), (), (), bound, (), dry_run,
        new_branch=new_branch, moves_from=moves_from,
    )  # fmt: skip
    if mode == "elsewhere":
        holder = checked_out_at(_common_repo(repo), ref.removeprefix("refs/heads/"))
        conflict = Conflict(ref, "checked-out-elsewhere", f"the branch is checked out at {holder}")
        return replace(result, conflicts=(conflict,))
    promoted = replayed_tip is not None and (replayed_tip != tip or new_branch)
    if not changes.git_changes() and not reverted and not promoted:
        return replace(result, skipped=tuple(changes.paths))
    with scratch_repo(repo) if scratch is None else nullcontext(scratch) as scratch:
        cleaner = Cleaner(repo)
        build = build_commit_tree(scratch, view, changes, start, base, reverted or {}, cleaner)
        result = replace(result, merged=build.merged, conflicts=build.conflicts)
        if build.tree is None:
            return result
        # The bound worktree is at the branch's tip, which is not where the commit starts when
        # the session's own commits were replayed first: compare it with what it has.
        checked_out = commit_tree(scratch, tip) if start != tip else build.tip_tree
        update = (
            _plan_commit_worktree(repo, scratch, view, changes, build, force, checked_out)
            if bound
            else None
        )
        result = replace(result, tree=build.tree, **_outcome(changes, update))
        if result.conflicts or dry_run:
            return result
        copy_objects(scratch, repo, build.tree)
        if build.tree != build.tip_tree or start is None:  # else the tip has every change
            commit = _create_commit(repo, build.tree, start, message, author, committer)
            result = replace(result, commit=commit)
        elif promoted:
            result = replace(result, commit=start)
        if on_prepared is not None:
            on_prepared(result)
        return replace(result, changed_dirs=finish_commit(repo, result, scratch, view, cleaner))


def finish_commit(
    repo: pygit2.Repository,
    result: CommitResult,
    objects: pygit2.Repository | None = None,
    view: SessionView | None = None,
    cleaner: Cleaner | None = None,
) -> tuple[str, ...]:
    """Make a prepared commit visible: worktree files, index, then the branch ref.

    Idempotent, so a journaled `CommitResult` of an apply that was killed half-way completes
    by calling this again. The branch's lock file is taken first and held to the end, and the
    tip compared under it (`reflock`): the ref moves only from `result.expected_tip` (or is
    already there), and a commit made meanwhile is never overwritten (`reflock.Moved`, before
    anything is written). When the worktree is updated, `index.lock` is taken before any
    file is written: a held one stops the apply with nothing changed. Returns the real
    directories whose entries changed. `objects` is where the commit's trees and blobs are
    read (default `repo`, which must have them): the apply passes its scratch repository,
    which still holds them in memory. A file is read from `view`, when given and still
    holding the committed bytes (or bytes `cleaner`'s filters make them of), rather than from
    the object store.
    """
    if result.commit is None and not result.worktree_updated:
        return ()
    new = result.commit or result.expected_tip
    assert new is not None
    changed_dirs: tuple[str, ...] = ()
    update = result.worktree_updated and result.tree is not None
    # in git's own order (as `git commit`): the index, then the branch
    index = IndexLock(repo, new) if update else None
    ref: RefLock | None = None
    try:
        ref = RefLock(repo, result.branch, new)
        before = None if result.new_branch else result.expected_tip
        if ref.current not in (before, new):
            raise Moved(f"{result.branch} moved to {ref.current} during the apply; apply again")
        if index is not None and result.tree is not None:
            source = objects or repo
            tree = lookup_tree(source, result.tree)
            cleaner = cleaner or Cleaner(repo)
            targets = [
                _commit_target(source, tree, write, view, cleaner) for write in result.updated
            ]
            changed_dirs = write_targets(workdir_of(repo), targets)
            index.write(partial(_update_index, workdir_of(repo), tree, result.updated_paths))
        if result.commit is not None:
            ref.swap(before, "gitsess apply: commit")
    finally:
        if ref is not None:
            ref.release()
        if index is not None:
            index.release()
    return changed_dirs


def _commit_target(
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    write: PathWrite,
    view: SessionView | None,
    cleaner: Cleaner,
) -> Target:
    if write.kind not in ("file", "symlink") or not write.rewrite:
        return Target(write.path, write.kind, write.perm, None, write.rewrite)
    oid = tree[write.path].id
    big = None
    if write.kind == "file" and view is not None:
        content = partial(worktree_bytes, repo, view, write.path, oid, cleaner)
        entry = view.entry(write.path)
        if entry is not None and entry.size > BIG_FILE:
            big = BigFile(write.path, str(oid), entry.size, partial(view.open, write.path))
    else:
        content = partial(blob_data, repo, oid)
    return Target(write.path, write.kind, write.perm, content, write.rewrite, big)


def _create_commit(
    repo: pygit2.Repository,
    tree: str,
    parent: str | None,
    message: str,
    author: pygit2.Signature,
    committer: pygit2.Signature,
) -> str:
    parents = [pygit2.Oid(hex=parent)] if parent else []
    text = message if message.endswith("\n") else message + "\n"
    oid = repo.create_commit(None, author, committer, text, pygit2.Oid(hex=tree), parents)
    return str(oid)


def _branch_ref(branch: str) -> str:
    ref = branch if branch.startswith("refs/") else "refs/heads/" + branch
    if not pygit2.reference_is_valid_name(ref):
        raise GitsessError(f"{branch!r} is not a valid branch name")
    return ref


def branch_tip(repo: pygit2.Repository, branch: str) -> str | None:
    """The commit `branch` (a name or a full ref) is at; None when it does not exist."""
    return _ref_target(repo, _branch_ref(branch))


def _ref_target(repo: pygit2.Repository, ref: str) -> str | None:
    try:
        target = repo.references[ref].resolve().target
    except KeyError:
        return None
    return str(target)


def _common_repo(repo: pygit2.Repository) -> pygit2.Repository:
    return pygit2.Repository(str(common_dir(repo)))


def _worktree_mode(repo: pygit2.Repository, ref: str) -> str:
    """ "bound": checked out in `repo`'s worktree; "elsewhere": in another; "none"."""
    if not ref.startswith("refs/heads/"):
        return "none"
    holder = checked_out_at(_common_repo(repo), ref.removeprefix("refs/heads/"))
    if holder is None:
        return "none"
    return "bound" if holder.resolve() == workdir_of(repo).resolve() else "elsewhere"


# ---------------------------------------------------------------------------------------------
# the checked-out worktree after a commit


@dataclass(frozen=True)
class _CommitWorktree:
    targets: tuple[Target, ...]
    conflicts: tuple[Conflict, ...]
    skipped: tuple[str, ...]


def _outcome(changes: ChangeSet, update: _CommitWorktree | None) -> dict[str, Any]:
    """Result fields: with the worktree updated every selected path is applied (bar directories
    that must stay); otherwise only what git holds is, the rest stays in the session."""
    if update is None:
        carried = carried_by_git(changes)
        applied = tuple(c.path for c in changes.changes if c.path in carried)
        return {"applied": applied, "skipped": left_out_by_git(changes)}
    skipped_set = set(update.skipped)
    return {
        "applied": tuple(c.path for c in changes.changes if c.path not in skipped_set),
        "skipped": tuple(sorted([*update.skipped, *changes.special])),
        "conflicts": update.conflicts,
        "updated": tuple(PathWrite(t.path, t.kind, t.perm, t.rewrite) for t in update.targets),
    }


def _plan_commit_worktree(
    repo: pygit2.Repository,
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    build: CommitBuild,
    force: bool,
    checked_out: str,
) -> _CommitWorktree:
    """The real-tree writes that bring the bound worktree (at tree `checked_out`) to the
    commit, and their conflicts: every session path gets its view state (the merged content
    where the merge changed it), and every other path the commit changes gets its content."""
    assert build.tree is not None
    root = workdir_of(repo)
    tree = lookup_tree(scratch, build.tree)
    session = {c.path: c for c in changes.changes}
    targets: list[Target] = []
    for change in changes.changes:
        entry = tree_entry(tree, change.path)
        if not change.git_visible or entry == build.session_entries[change.path]:
            targets.append(session_target(view, change))
        else:
            targets.append(tree_target(tree, change.path))  # the merge changed it
    merged_paths = _tree_diff_paths(scratch, checked_out, build.tree) - set(session)
    # (a path the view shows as the real file has it is written and staged as the commit has
    # it, which is that: no local change of the real tree's)
    targets.extend(tree_target(tree, path) for path in sorted(merged_paths))
    merged_paths -= build.already_reverted
    plan = plan_writes(root, targets)
    conflicts = list(plan.conflicts)
    if not force:
        kept = {t.path for t in plan.targets}
        tip_tree = lookup_tree(scratch, checked_out)
        for change in changes.changes:
            if change.path not in kept:
                continue
            # the lstat checks first: hashing the real file is needed only when they object
            found = worktree_conflicts(view, root, [change])
            if found and not clean_for_merge(tip_tree, root, change):
                conflicts.extend(found)
        conflicts += _local_changes(tip_tree, root, merged_paths)
    return _CommitWorktree(plan.targets, unique_conflicts(conflicts), plan.skipped)


def _tree_diff_paths(repo: pygit2.Repository, a: str, b: str) -> set[str]:
    diff = lookup_tree(repo, a).diff_to_tree(lookup_tree(repo, b))
    paths: set[str] = set()
    for delta in diff.deltas:
        paths.add(delta.old_file.path)
        paths.add(delta.new_file.path)
    return paths


def _local_changes(tip_tree: pygit2.Tree, root: Path, paths: Iterable[str]) -> list[Conflict]:
    """Paths the merge rewrites whose real file is not the tip's (an uncommitted change)."""
    conflicts = []
    for path in sorted(paths):
        if real_git_entry(root, path) != tree_entry(tip_tree, path):
            conflicts.append(Conflict(path, "local-change", "has uncommitted changes"))
    return conflicts


def _update_index(root: Path, tree: pygit2.Tree, paths: Iterable[str], index: pygit2.Index) -> None:
    """Stage each path as the commit has it, with stat data of the file just written (so git
    sees it clean without hashing it again)."""
    entries = {path: tree_entry(tree, path) for path in paths}
    for path in sorted(entries, key=lambda p: entries[p] is not None):  # removals first
        entry = entries[path]
        if entry is None:
            if path in index:
                index.remove(path)
            continue
        # libgit2 drops what is in the way (see edit_tree)
        full = f"{root}/{path}"  # a Path per file costs more than its lstat
        index.add(_StatEntry(path, pygit2.Oid(hex=entry[0]), FileMode(entry[1]), full))


class _StatEntry(pygit2.IndexEntry):
    """An index entry carrying the file's stat data.

    pygit2's IndexEntry has only path, id and mode, so its C struct gets the stat fields here
    (through pygit2's private `_to_c`; without it the entry is still right, git just re-hashes
    the file once). `Index.add(path)` would do this too, but it re-reads, re-hashes and
    re-compresses the file into the object database: seconds for a large file.
    """

    def __init__(self, path: str, oid: pygit2.Oid, mode: FileMode, full: str) -> None:
        super().__init__(path, oid, mode)
        self.stat = os.lstat(full)

    def _to_c(self) -> Any:
        centry, keep = super()._to_c()
        st = self.stat
        for field, ns in (("ctime", st.st_ctime_ns), ("mtime", st.st_mtime_ns)):
            stamp = getattr(centry, field)
            stamp.seconds = (ns // 1_000_000_000) & 0x7FFFFFFF
            stamp.nanoseconds = ns % 1_000_000_000
        # git keeps the low 32 bits of these, as the index format has no room for more
        centry.dev = st.st_dev & 0xFFFFFFFF
        centry.ino = st.st_ino & 0xFFFFFFFF
        centry.uid = st.st_uid & 0xFFFFFFFF
        centry.gid = st.st_gid & 0xFFFFFFFF
        centry.file_size = st.st_size & 0xFFFFFFFF
        return centry, keep
