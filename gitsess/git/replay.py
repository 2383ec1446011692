"""Carrying commits made inside a session onto a branch of the real repository.

The session's commits are objects of its own copy-on-write `.git`, read through a repository
that has them as one more backend (`session_objects`), and promoted into the real store before
any ref names them. Replaying them is a fast-forward when the branch has not moved since the
session's base, and otherwise a rebase done three ways in memory, as `git rebase` would:
empty results are dropped, and so are commits whose patch id the branch's new commits have
(they came by another route, a fork's apply or a `git merge`); a merge commit keeps its other
parents. Only objects are written here, never a ref: the caller moves the branch once it has
checked everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pygit2
from pygit2.enums import ObjectType

from gitsess.errors import GitsessError


@dataclass(frozen=True)
class Replayed:
    tip: str | None  # the branch's new tip; None when there are conflicts
    commits: tuple[str, ...]  # the commit ids new on the branch, oldest first
    fast_forward: bool
    # paths that conflict: then no tip, though some objects may have been written
    conflicts: tuple[str, ...]


def replay_commits(
    repo: pygit2.Repository,
    commits: Sequence[str],
    onto: str | None,
    *,
    squash_message: str | None = None,
    committer: pygit2.Signature | None = None,
) -> Replayed:
    """Put `commits` (a first-parent chain, oldest first) on top of `onto`, moving no ref.

    `onto` equal to the first commit's parent is a fast-forward (unless squashing). `onto` None
    (the branch does not exist) re-applies onto an empty tree, the first new commit a root.
    A commit that becomes empty is dropped, like `git rebase` does; when all are, `tip` is
    `onto`. `committer` None keeps each commit's own committer.
    """
    chain = _load_chain(repo, commits)
    if not chain:
        return Replayed(onto, (), True, ())
    base = _first_parent(chain[0])
    if squash_message is None and base == onto:
        return Replayed(str(chain[-1].id), tuple(str(c.id) for c in chain), True, ())
    if squash_message is not None:
        return _squash(repo, chain, onto, squash_message, committer)
    return _rebase(repo, chain, onto, committer, _patch_ids(repo, onto, base))


def _load_chain(repo: pygit2.Repository, ids: Sequence[str]) -> list[pygit2.Commit]:
    chain: list[pygit2.Commit] = []
    for hex_id in ids:
        obj = _commit(repo, hex_id, "session commit")
        if chain and _first_parent(obj) != str(chain[-1].id):
            # out of order or from elsewhere: re-applying them would silently mix histories
            raise GitsessError(
                f"session commit {obj.short_id} does not follow {chain[-1].short_id}"
            )
        chain.append(obj)
    return chain


def _commit(repo: pygit2.Repository, hex_id: str, what: str) -> pygit2.Commit:
    try:
        obj = repo.get(hex_id)
    except ValueError as e:
        raise GitsessError(f"{what} {hex_id!r} is not an object id") from e
    if obj is None:
        raise GitsessError(f"{what} {hex_id} is not in the repository")
    if obj.type != ObjectType.COMMIT:
        raise GitsessError(f"{what} {hex_id} is not a commit")
    return obj.peel(pygit2.Commit)


def _first_parent(commit: pygit2.Commit) -> str | None:
    return str(commit.parent_ids[0]) if commit.parent_ids else None


def _tree_of(repo: pygit2.Repository, commit_id: str | None) -> pygit2.Oid:
    if commit_id is None:
        # an unborn side merges as the empty tree; writing it is harmless and idempotent
        return repo.TreeBuilder().write()
    return _commit(repo, commit_id, "commit").tree_id


def _merge(
    repo: pygit2.Repository, ancestor: pygit2.Oid, ours: pygit2.Oid, theirs: pygit2.Oid
) -> pygit2.Oid | tuple[str, ...]:
    """The merged tree's id, or the conflicting paths."""
    index = repo.merge_trees(ancestor, ours, theirs)
    if index.conflicts is not None:
        paths = {
            next(entry.path for entry in sides if entry is not None) for sides in index.conflicts
        }
        return tuple(sorted(paths))
    return index.write_tree(repo)


def _new_commit(
    repo: pygit2.Repository,
    like: pygit2.Commit,
    author: pygit2.Signature,
    committer: pygit2.Signature,
    message: str | bytes,
    tree: pygit2.Oid,
    parent_ids: list[str],
) -> str:
    parents = [pygit2.Oid(hex=p) for p in parent_ids]
    if like.message_encoding:
        oid = repo.create_commit(
            None, author, committer, message, tree, parents, like.message_encoding
        )
    else:
        oid = repo.create_commit(None, author, committer, message, tree, parents)
    return str(oid)


def _patch_ids(repo: pygit2.Repository, onto: str | None, base: str | None) -> set[str]:
    """The patch ids of the commits `onto` has and `base` lacks (as `git rebase` finds the
    commits of a branch that are upstream already, by another route)."""
    if onto is None:
        return set()
    walker = repo.walk(pygit2.Oid(hex=onto))
    if base is not None:
        walker.hide(pygit2.Oid(hex=base))
    return {_patch_id(repo, c) for c in walker if len(c.parent_ids) == 1}


def _patch_id(repo: pygit2.Repository, commit: pygit2.Commit) -> str:
    parent = commit.parents[0].tree if commit.parent_ids else None
    diff = (
        parent.diff_to_tree(commit.tree)
        if parent is not None
        else commit.tree.diff_to_tree(swap=True)
    )
    return str(diff.patchid)


def _rebase(
    repo: pygit2.Repository,
    chain: list[pygit2.Commit],
    onto: str | None,
    committer: pygit2.Signature | None,
    upstream: set[str],
) -> Replayed:
    """Each commit merged three ways onto the tip; a merge commit keeps its other parents (the
    commits it merged stay as they are). A commit whose patch the tip's new commits have
    already is left out."""
    tip = onto
    tip_tree = _tree_of(repo, onto)
    created: list[str] = []
    for commit in chain:
        if len(commit.parent_ids) == 1 and _patch_id(repo, commit) in upstream:
            continue
        merged = _merge(repo, _tree_of(repo, _first_parent(commit)), tip_tree, commit.tree_id)
        if isinstance(merged, tuple):
            return Replayed(None, (), False, merged)
        if merged == tip_tree and len(commit.parent_ids) == 1:
            continue
        # raw bytes: the message keeps its own encoding, untouched by a decode round trip
        tip = _new_commit(
            repo,
            commit,
            commit.author,
            committer or commit.committer,
            commit.raw_message,
            merged,
            [*([tip] if tip is not None else []), *map(str, commit.parent_ids[1:])],
        )
        tip_tree = merged
        created.append(tip)
    return Replayed(tip, tuple(created), False, ())


def _squash(
    repo: pygit2.Repository,
    chain: list[pygit2.Commit],
    onto: str | None,
    message: str,
    committer: pygit2.Signature | None,
) -> Replayed:
    first, last = chain[0], chain[-1]
    onto_tree = _tree_of(repo, onto)
    merged = _merge(repo, _tree_of(repo, _first_parent(first)), onto_tree, last.tree_id)
    if isinstance(merged, tuple):
        return Replayed(None, (), False, merged)
    if merged == onto_tree:
        return Replayed(onto, (), False, ())
    parents = [pygit2.Oid(hex=onto)] if onto is not None else []
    oid = repo.create_commit(
        None, first.author, committer or last.committer, message, merged, parents
    )
    return Replayed(str(oid), (str(oid),), False, ())
