"""The view's `.git`: which paths are git's own, and where a linked worktree's git dirs are.

A linked worktree's real `.git` is a file naming its admin dir, which git would reach outside
the view. The view shows a directory there instead (`linked_git`, the tree's redirects): `.git`
is the admin dir (HEAD, index, logs), `.git/common` the common dir (refs, config, objects; the
state dir and this worktree's own entry of `worktrees/` sealed), and `.git/commondir` says
`common`, so every part of git's state is copy-on-write. Known gap: `git worktree list` inside
names the main worktree `<view>/.git/common` and leaves the session's worktree out.
"""

from __future__ import annotations

import os

# The worktree's own `.git` is the session's own copy-on-write, like every other path, its
# object store included: what git writes there is the session's until an apply promotes it.
GIT = b".git"
GIT_OBJECTS = b".git/objects"
# A linked worktree's `.git` is a file naming its admin dir in the common dir. The view shows a
# directory there instead: the admin dir, with the common dir below it as `common` (what the
# view's `commondir` names), so that git's whole state is in the view and copy-on-write.
GIT_COMMON = b".git/common"
OBJECT_STORES = (GIT_OBJECTS, GIT_COMMON + b"/objects")


def linked_git(root: bytes, session_dir: str) -> dict[bytes, bytes]:
    """For a linked worktree (`root/.git` a `gitdir:` file): the view's `.git` is its admin
    dir, `.git/common` the common dir, and `.git/commondir` a file of the session's saying
    so. Empty for a main worktree, or when `.git` is anything else."""
    try:
        with open(root + b"/.git", "rb") as f:
            head = f.read(4096)
    except OSError:
        return {}
    if not head.startswith(b"gitdir: "):
        return {}
    admin = os.path.join(root, head[len(b"gitdir: ") :].strip())
    try:
        with open(os.path.join(admin, b"commondir"), "rb") as f:
            common = os.path.normpath(os.path.join(admin, f.read().strip()))
    except OSError:
        return {}
    pointer = os.path.join(os.fsencode(session_dir), b"commondir")
    if not os.path.exists(pointer):
        try:
            with open(pointer, "wb") as f:
                f.write(b"common\n")
        except OSError:
            return {}
    return {GIT: os.path.normpath(admin), GIT_COMMON: common, b".git/commondir": pointer}


def in_git(rel: bytes | None) -> bool:
    """Whether a worktree path is the worktree's `.git` or below it: git changes those from
    outside the session with no lower watch to say so."""
    return rel is not None and (rel == GIT or rel.startswith(GIT + b"/"))


def object_store(rel: bytes | None) -> bytes | None:
    """The object store (`OBJECT_STORES`) a worktree path lies below, None if none."""
    if rel is None:
        return None
    return next((t for t in OBJECT_STORES if rel.startswith(t + b"/")), None)
