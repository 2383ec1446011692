"""The session's commit tree: the base tree with the session's paths, merged three ways onto a
moved branch tip or HEAD (`merge_onto_head`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pygit2

from gitsess.git.changes import Change, ChangeSet
from gitsess.git.cleaning import Cleaner
from gitsess.git.conflicts import Conflict, entry_of, same_stat
from gitsess.git.objects import commit_tree, edit_tree, lookup_tree, store_view_blob, tree_entry
from gitsess.git.view import SessionView


@dataclass(frozen=True)
class Merged:
    """The session's changes merged onto the worktree's HEAD when it moved since the base."""

    entries: dict[str, tuple[str, int] | None]  # paths whose merged state is not the view's
    conflicts: tuple[Conflict, ...]
    head_tree: str | None = None  # the tree merged onto (None: no merge was needed)


def merge_onto_head(
    repo: pygit2.Repository,
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    base: str | None,
) -> Merged:
    """The session's git-visible changes merged three-way onto the commit the bound worktree
    has checked out, when that is not the session's base (a `git pull`, or another session's
    apply, since): without it a real file the branch changed meanwhile would be written, or
    diffed, back to the base's content. Merged blobs are in `scratch`."""
    head = _head_commit(repo)
    if head is None or base is None or head == base or not changes.git_changes():
        return Merged({}, ())
    build = build_commit_tree(scratch, view, changes, head, base, {})
    if build.tree is None:
        return Merged({}, build.conflicts)
    tree = lookup_tree(scratch, build.tree)
    entries = {}
    for change in changes.git_changes():
        entry = tree_entry(tree, change.path)
        if entry != build.session_entries[change.path]:
            entries[change.path] = entry
    return Merged(entries, (), build.tip_tree)


def _head_commit(repo: pygit2.Repository) -> str | None:
    try:
        return None if repo.head_is_unborn else str(repo.head.peel(pygit2.Commit).id)
    except pygit2.GitError:
        return None


@dataclass(frozen=True)
class CommitBuild:
    tree: str | None  # the commit's tree; None on conflict
    tip_tree: str
    merged: bool
    conflicts: tuple[Conflict, ...]
    session_entries: dict[str, tuple[str, int] | None]  # git state of each session path
    # `reverted` paths the worktree already has
    already_reverted: frozenset[str] = frozenset()


def build_commit_tree(
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    tip: str | None,
    base: str | None,
    reverted: Mapping[str, tuple[str, int] | None],
    cleaner: Cleaner | None = None,
) -> CommitBuild:
    """Base tree + the session's git-visible changes, merged onto the tip when it moved; with
    `cleaner`, the files as git would store them."""
    git_changes = changes.git_changes()
    entries = {c.path: store_view_blob(scratch, view, c, cleaner) for c in git_changes}
    base_tree = commit_tree(scratch, base)
    tip_tree = commit_tree(scratch, tip)
    theirs = edit_tree(scratch, base_tree, {**reverted, **entries})
    already_reverted = frozenset(reverted) - set(entries)
    if tip == base:
        return CommitBuild(theirs, tip_tree, False, (), entries, already_reverted)
    tip_obj = lookup_tree(scratch, tip_tree)
    own_base = {
        c.path: c.git_old
        for c in git_changes
        if _preimage_known(view, c) and c.git_old == tree_entry(tip_obj, c.path)
    }
    ancestor = edit_tree(scratch, base_tree, own_base)
    if ancestor == tip_tree:
        return CommitBuild(theirs, tip_tree, False, (), entries, already_reverted)
    merged = scratch.merge_trees(ancestor, tip_tree, theirs)
    if merged.conflicts is not None:
        details = {_conflict_path(entry): _merge_detail(entry) for entry in merged.conflicts}
        conflicts = tuple(Conflict(p, "merge", details[p]) for p in sorted(details))
        return CommitBuild(None, tip_tree, True, conflicts, entries, already_reverted)
    return CommitBuild(
        str(merged.write_tree(scratch)), tip_tree, True, (), entries, already_reverted
    )


def _conflict_path(
    entries: tuple[pygit2.IndexEntry | None, pygit2.IndexEntry | None, pygit2.IndexEntry | None],
) -> str:
    return next(str(e.path) for e in entries if e is not None)


def _merge_detail(
    entries: tuple[pygit2.IndexEntry | None, pygit2.IndexEntry | None, pygit2.IndexEntry | None],
) -> str:
    """What each side did to a path that conflicts (base, the branch's tip, the session)."""
    base, branch, session = entries
    if base is None:
        return "added on the branch and in the session, with different content"
    if session is None:
        return "removed in the session, changed on the branch"
    if branch is None:
        return "changed in the session, removed on the branch"
    return "changed on the branch and in the session"


def _preimage_known(view: SessionView, change: Change) -> bool:
    """Whether the session's edit of this path was made on top of today's real file."""
    record = view.copied_from(change.path)
    if record is None:
        return change.old is None
    return change.old is not None and same_stat(record, entry_of(change.old))
