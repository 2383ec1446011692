"""`apply --patch --mbox` of a session with commits of its own: one mail per commit (its
author, date and message, as `git format-patch` makes them), then one for the changes made
since, which `git am` applies in order."""

from __future__ import annotations

from collections.abc import Mapping

import pygit2
from pygit2.enums import DiffFind, DiffOption, DiffStatsFormat

from gitsess.git.archive_commits import snapshot_tree
from gitsess.git.changes import ChangeSet
from gitsess.git.objects import as_signature, commit_tree
from gitsess.git.patch import mbox_mail
from gitsess.git.repo import Person
from gitsess.git.view import SessionView


def commit_mail(repo: pygit2.Repository, commit_id: str) -> bytes:
    commit = repo[commit_id].peel(pygit2.Commit)
    parent = commit.parents[0].tree.id if commit.parents else None
    text = _tree_patch(repo, None if parent is None else str(parent), str(commit.tree.id))
    return mbox_mail(commit.message, commit.author, *text) if text[1] else b""


def changes_mail(
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    head: str,
    undo: Mapping[str, tuple[str, int] | None],
    *,
    message: str,
    author: Person | pygit2.Signature,
) -> bytes:
    """The mail of what the view changed on top of the session's HEAD commit."""
    old = commit_tree(scratch, head)
    new = snapshot_tree(scratch, view, changes, head, undo)
    stat, patch = _tree_patch(scratch, old, new)
    if not patch:
        return b""
    return mbox_mail(message, as_signature(scratch, author, "AUTHOR"), stat, patch)


def _tree_patch(repo: pygit2.Repository, old: str | None, new: str) -> tuple[str, bytes]:
    """(`git diff --stat` text, `--binary` patch) between two trees (None: the empty tree)."""
    new_tree = repo[new].peel(pygit2.Tree)
    if old is None:
        diff = new_tree.diff_to_tree(flags=DiffOption.SHOW_BINARY, swap=True)
    else:
        diff = repo[old].peel(pygit2.Tree).diff_to_tree(new_tree, flags=DiffOption.SHOW_BINARY)
    diff.find_similar(DiffFind.FIND_RENAMES)
    patch = b"".join(p.data for p in diff if p is not None)
    return diff.stats.format(DiffStatsFormat.FULL, 80), patch
