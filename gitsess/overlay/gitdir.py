"""The view's `.git`: which paths are git's own, and where a linked worktree's git dirs are.

A linked worktree's real `.git` is a file naming its admin dir, which git would reach outside
the view. The view shows a directory there instead (`linked_git`, the tree's redirects): `.git`
is the admin dir (HEAD, index, logs), `.git/common` the common dir (refs, config, objects; the
state dir and this worktree's own entry of `worktrees/` sealed), and `.git/commondir` names
`<mount point>/.git/common` (`name_common_at`; `common` until a daemon mounts the view), so
every part of git's state is copy-on-write. Inside a run the view's common dir is bound over
the real one and that path is a symlink to it (`runtime/inplace.py`): git finds the common dir
at its real path and names the main worktree as outside. Known gap: `git worktree list` inside
leaves the session's own worktree out. git takes a worktree for the current one only when its
git dir is `<common>/worktrees/<id>`, which a `.git` directory never is, and takes the branch
of any other for checked out there (`git switch` and `git rebase` to it refuse), so that entry
stays sealed. Closing the gap needs the view itself to show `.git` as a `gitdir:` file with the
admin dir at `<common>/worktrees/<id>` (a mount in the run cannot turn a directory into a file,
and one FUSE tree serves the run and the mount point alike).
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
GIT_COMMONDIR = b".git/commondir"
OBJECT_STORES = (GIT_OBJECTS, GIT_COMMON + b"/objects")
_BELOW_GIT = GIT + b"/"
_STORE_PREFIXES = tuple((t + b"/", t) for t in OBJECT_STORES)
_BELOW_STORES = tuple(below for below, _ in _STORE_PREFIXES)


def linked_dirs(root: bytes) -> tuple[bytes, bytes] | None:
    """A linked worktree's admin dir and common dir (`root/.git` a `gitdir:` file), None for a
    main worktree, or when `.git` is anything else."""
    try:
        with open(root + b"/.git", "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not head.startswith(b"gitdir: "):
        return None
    admin = os.path.join(root, head[len(b"gitdir: ") :].strip())
    try:
        with open(os.path.join(admin, b"commondir"), "rb") as f:
            common = os.path.normpath(os.path.join(admin, f.read().strip()))
    except OSError:
        return None
    return os.path.normpath(admin), common


def linked_git(root: bytes, session_dir: str) -> dict[bytes, bytes]:
    """For a linked worktree (`linked_dirs`): the view's `.git` is its admin dir, `.git/common`
    the common dir, and `.git/commondir` a file of the session's saying so. Empty for a main
    worktree, or when `.git` is anything else."""
    dirs = linked_dirs(root)
    if dirs is None:
        return {}
    admin, common = dirs
    pointer = os.path.join(os.fsencode(session_dir), b"commondir")
    if not os.path.exists(pointer):
        try:
            with open(pointer, "wb") as f:
                f.write(b"common\n")
        except OSError:
            return {}
    return {GIT: admin, GIT_COMMON: common, GIT_COMMONDIR: pointer}


def name_common_at(pointer: bytes, mountpoint: str) -> None:
    """Make the view's `.git/commondir` (the session's file `pointer`) name the common dir by
    its path at the mount point, `<mountpoint>/.git/common`: there, git resolves it as it did
    `common`; inside a run, where that path is a symlink to the real common dir (over which
    the view's is bound, `runtime/inplace.py`), git finds the common dir at its real path."""
    text = os.path.join(os.fsencode(os.path.abspath(mountpoint)), GIT_COMMON) + b"\n"
    try:
        with open(pointer, "rb") as f:
            if f.read() == text:
                return
        aside = pointer + b".new"
        with open(aside, "wb") as f:
            f.write(text)
        os.replace(aside, pointer)
    except OSError:
        pass  # `common` still leads git to the view's common dir; only the name differs


def in_git(rel: bytes | None) -> bool:
    """Whether a worktree path is the worktree's `.git` or below it: git changes those from
    outside the session with no lower watch to say so."""
    return rel is not None and (rel == GIT or rel.startswith(_BELOW_GIT))


def object_store(rel: bytes | None) -> bytes | None:
    """The object store (`OBJECT_STORES`) a worktree path lies below, None if none."""
    # Asked several times for each request below `.git` (each loose object git writes), and
    # of worktree paths too: one `startswith` of a tuple rules most paths out (a generator
    # that joined the prefixes anew cost 2-3 us a call, as much as an lstat).
    if rel is None or not rel.startswith(_BELOW_STORES):
        return None
    for below, top in _STORE_PREFIXES:
        if rel.startswith(below):
            return top
    return None
