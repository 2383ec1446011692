"""A session's own git state: where its HEAD is, and the commits it made that its branch lacks.

The view's `.git` is copy-on-write (see docs/ARCHITECTURE.md, "git inside a session"), objects
included, so git run inside a session commits to the session's refs, into the session's own
object store. These are the services that read that state back for `show`, `ls` and `apply`,
and that copy the objects of its commits into the real repository when they leave the session.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import ObjectType

from gitsess.git.scratch import ScratchRepository, scratch_repo
from gitsess.git.session_refs import SessionHead, ahead_commits, read_head
from gitsess.store.registry import Session

if TYPE_CHECKING:  # `ls` counts commits without loading apply's machinery
    from gitsess.git.archive import ArchiveInfo
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
    with scratch_repo(repo, view) as objects:
        commits = ahead_commits(objects, head.commit, upstream(repo, session))
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


def restored_git(repo: pygit2.Repository, session: Session, info: ArchiveInfo) -> dict[str, bytes]:
    """The files of a restored session's `.git` that bring back the commits made inside the
    archived one (`info.head`): its branch ending at them, and their objects as loose
    objects of the session's own (the archive that kept them reachable goes with the restore,
    and the real repository's gc must not take them from the session)."""
    from gitsess.git.session_objects import loose_file, needed_objects

    assert info.head is not None
    linked = (session.worktree / ".git").is_file()
    if session.branch is not None:
        files = files_for_head(repo, session, info.head)
    else:
        files = {"HEAD": info.head.encode() + b"\n"}
    commits = ahead_commits(repo, info.head, info.base)
    base_objects = _tree_objects(repo, info.base)
    store = ("common/" if linked else "") + "objects/"
    for _, kind, data in needed_objects(repo, commits, base_objects.__contains__):
        rel, raw = loose_file(kind, data)
        files[store + rel] = raw
    return files


def _tree_objects(repo: pygit2.Repository, commit: str | None) -> set[pygit2.Oid]:
    """Every tree and blob of `commit`'s tree (none for None)."""
    if commit is None:
        return set()
    tree = repo[commit].peel(pygit2.Tree)
    found = {tree.id}
    pending = [tree]
    while pending:
        for entry in pending.pop():
            if entry.id in found or entry.type == ObjectType.COMMIT:
                continue
            found.add(entry.id)
            if entry.type == ObjectType.TREE:
                sub = repo[entry.id]
                assert isinstance(sub, pygit2.Tree)
                pending.append(sub)
    return found


def upstream(repo: pygit2.Repository, session: Session) -> str | None:
    """What the session's commits are counted against: its branch's real tip, else its base."""
    if session.branch is not None:
        try:
            return str(repo.references["refs/heads/" + session.branch].resolve().target)
        except KeyError:
            pass
    return session.base_commit


def replay(
    repo: pygit2.Repository, git: SessionGit, onto: str | None, objects: pygit2.Repository
) -> Replayed:
    """The session's commits rebuilt on `onto` (or a fast-forward to them); no ref moves.
    `objects` is where they are read and the rebuilt ones written: the real repository once
    they are promoted (`promote`), a scratch repository over it for a dry run."""
    from gitsess.git.objects import signature
    from gitsess.git.replay import replay_commits

    return replay_commits(
        objects,
        git.commits,
        onto,
        committer=signature(repo, "COMMITTER"),
    )


def promote(scratch: ScratchRepository, repo: pygit2.Repository, git: SessionGit) -> int:
    """Copy into the real object store exactly the objects the session's commits need that
    it lacks (read from `scratch`, a scratch repository over `repo` with the session's own
    objects); how many. Nothing else of the real `.git` changes."""
    from gitsess.git.objects import promote as copy_in

    return copy_in(scratch, repo, git.commits)


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
