"""A session's own git state: where its HEAD is, and the commits it made that its branch lacks.

The view's `.git` is copy-on-write (see docs/ARCHITECTURE.md, "git inside a session"), so git
run inside a session commits to the session's refs, into the shared object store. These are
the services that read that state back for `show`, `ls` and `apply`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2

from gitsess.git.session_refs import SessionHead, ahead_commits, read_head
from gitsess.store.registry import Session

if TYPE_CHECKING:  # `ls` counts commits without loading apply's machinery
    from gitsess.git.pathspec import Pathspec
    from gitsess.git.replay import Replayed
    from gitsess.git.view import SessionView
    from gitsess.overlay.view import OverlayView

# What a replay makes stale in the session's `.git`: with the branch and the real index at
# the replayed commits, the session follows the real ones again.
_FOLLOWED_AFTER_APPLY = ("HEAD", "index", "ORIG_HEAD", "COMMIT_EDITMSG", "logs/HEAD")


@dataclass(frozen=True)
class SessionGit:
    head: SessionHead
    commits: tuple[str, ...]  # the session's commits its branch lacks, oldest first
    common: str  # where the view's shared git state is, below `.git/` ("common/" when linked)

    def stale_after_apply(self) -> list[str]:
        """Paths of the session's `.git` that an apply of its commits hands back to the real
        repository (as view paths)."""
        paths = [".git/" + r for r in _FOLLOWED_AFTER_APPLY]
        if self.head.branch is not None:
            shared = (self.head.branch, "logs/" + self.head.branch)
            paths += [".git/" + self.common + r for r in shared]
        return paths


def state(view: OverlayView, repo: pygit2.Repository, session: Session) -> SessionGit | None:
    """The session's git state; None while it never changed its `.git` (then it is the real
    repository's, and has no commits of its own)."""
    if not view.touched_git():
        return None
    # A linked worktree's view keeps the common dir at `.git/common` (overlay/tree.py): HEAD
    # is the worktree's own, branches and packed-refs are shared.
    common = "common/" if view.read_git("commondir") is not None else ""

    def read(rel: str) -> bytes | None:
        return view.read_git(rel if rel == "HEAD" else common + rel)

    head = read_head(read)
    commits = ahead_commits(repo, head.commit, upstream(repo, session))
    return SessionGit(head, tuple(commits), common)


def own_commits(view: OverlayView, repo: pygit2.Repository, session: Session) -> SessionGit | None:
    """The session's git state when it has commits of its own (its HEAD is the last of
    them), else None."""
    git = state(view, repo, session)
    return git if git is not None and git.commits else None


def files_for_head(repo: pygit2.Repository, session: Session, head: str) -> dict[str, bytes]:
    """The files of a session's `.git` (paths below it) that make its branch end at `head`
    (commits made inside it, brought by `pull`): the branch's loose ref, and an index of
    `head`'s tree (with no stat data: git checks each file's content once, then records it)."""
    assert session.branch is not None
    linked = (session.worktree / ".git").is_file()
    ref = ("common/" if linked else "") + "refs/heads/" + session.branch
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "index")
        index = pygit2.Index(path)
        index.read_tree(repo[head].peel(pygit2.Commit).tree)
        index.write()
        with open(path, "rb") as f:
            data = f.read()
    return {ref: head.encode() + b"\n", "index": data}


def upstream(repo: pygit2.Repository, session: Session) -> str | None:
    """What the session's commits are counted against: its branch's real tip, else its base."""
    if session.branch is not None:
        try:
            return str(repo.references["refs/heads/" + session.branch].resolve().target)
        except KeyError:
            pass
    return session.base_commit


def replay(repo: pygit2.Repository, git: SessionGit, onto: str | None) -> Replayed:
    """The session's commits rebuilt on `onto` (or a fast-forward to them); no ref moves."""
    from gitsess.git.objects import signature
    from gitsess.git.replay import replay_commits

    return replay_commits(
        repo,
        git.commits,
        onto,
        committer=signature(repo, "COMMITTER"),
    )


def reverted_in_view(
    scratch: pygit2.Repository,
    view: SessionView,
    git: SessionGit,
    changed: set[str],
    pathspecs: Pathspec,
) -> dict[str, tuple[str, int] | None]:
    """Paths the session's commits changed where the view now shows what the worktree has
    (no change of the delta's): their view state, for the commit on top of the replayed ones."""
    first = scratch[git.commits[0]].peel(pygit2.Commit)
    last = scratch[git.commits[-1]].peel(pygit2.Commit)
    diff = (
        first.parents[0].tree.diff_to_tree(last.tree) if first.parents else last.tree.diff_to_tree()
    )
    out: dict[str, tuple[str, int] | None] = {}
    for delta in diff.deltas:
        for path in {delta.old_file.path, delta.new_file.path}:
            if path in changed or not pathspecs.matches(path):
                continue
            out[path] = _view_state(scratch, view, path)
    return out


def _view_state(scratch: pygit2.Repository, view: SessionView, path: str) -> tuple[str, int] | None:
    from gitsess.git.changes import State
    from gitsess.git.diff import read_view

    entry = view.entry(path)
    if entry is None or entry.kind not in ("file", "symlink"):
        return None
    state = State(entry.kind, entry.mode, entry.size, entry.mtime_ns, None)
    mode = state.git_mode
    assert mode is not None
    return str(scratch.create_blob(read_view(view, path, state))), mode
