"""The commits made on a session's own `.git`: its HEAD's, not on any real ref.

A session's `.git` is copy-on-write and its objects are its own (`overlay/objectdir.py`), so a
commit made inside the session exists only in the session until it is promoted; only the
session's refs know about it. HEAD is read through a callback rather than a path so that the
caller decides which layer (the view, the session's upper directory) the files come from; the
real repository's refs are read from its files (`head.real_refs`: inside a session libgit2 would
open the view's `.git`); the session's own commits are those its HEAD reaches and no real
branch, tag or remote-tracking ref reaches, nor its base (`commits_not_in`); HEAD itself is read
by `head.py`. Inside a run of the session's worktree the real refs are out of reach, and what
compares with them is reported as unknown rather than counted against the view.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import pygit2
from pygit2.enums import SortMode

from gitsess.errors import GitsessError


def commits_not_in(repo: pygit2.Repository, head: str | None, real: Iterable[str]) -> list[str]:
    """The commits reachable from `head` and from no commit of `real` (the real repository's
    ref tips, and the session's base), oldest first.

    As `git rev-list --reverse --topo-order head --not real...`: parents before children,
    merge commits and the commits they merge included.
    """
    if head is None:
        return []
    try:
        walker = repo.walk(pygit2.Oid(hex=head), SortMode.TOPOLOGICAL | SortMode.REVERSE)
        for tip in set(real):
            with contextlib.suppress(KeyError, ValueError):
                if repo.get(tip) is not None:
                    walker.hide(pygit2.Oid(hex=tip))
        return [str(commit.id) for commit in walker]
    except (KeyError, ValueError, pygit2.GitError) as e:
        raise GitsessError(f"cannot list the commits of {head[:12]}: {e}") from e


def first_parent_chain(repo: pygit2.Repository, commits: Sequence[str]) -> list[str]:
    """Of `commits` (a session's own, oldest first, the last its HEAD), those on the HEAD's
    first-parent line, oldest first: what a replay carries; the others come along as the
    further parents of merges."""
    if not commits:
        return []
    own = set(commits)
    chain = []
    at: str | None = commits[-1]
    while at is not None and at in own:
        chain.append(at)
        parents = repo[at].peel(pygit2.Commit).parent_ids
        at = str(parents[0]) if parents else None
    return chain[::-1]


def count_between(repo: pygit2.Repository, tip: str | None, hide: str | None) -> int:
    """How many commits `tip` reaches that `hide` does not."""
    if tip is None or tip == hide:
        return 0
    try:
        walker = repo.walk(pygit2.Oid(hex=tip))
        if hide is not None:
            walker.hide(pygit2.Oid(hex=hide))
        return sum(1 for _ in walker)
    except (KeyError, ValueError, pygit2.GitError):
        return 0
