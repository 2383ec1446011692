"""The view's `.git`: which paths are git's own, and where a linked worktree's git dirs are.

A linked worktree's real `.git` is a file naming its admin dir, which git would reach outside
the view. The view shows the layout git makes, with the common dir in the view: `.git` is a
`gitdir:` file of the session's naming `.GIT/worktrees/<id>`, `.GIT` is the common dir (refs,
config, objects; the state dir sealed, never listed), and its `worktrees/<id>` is this
worktree's admin dir (HEAD, index, logs), whose `commondir` is a file of the session's saying
`../..` (`linked_git`), so every part of git's state is copy-on-write (`GitLayout` names the
two dirs). The `.git` file names the admin dir by its path at the mount point,
`<mount point>/.GIT/worktrees/<id>` (`name_git_dir_at`; relative until a daemon mounts the
view): there, git finds the view's dirs; inside a run, where `<mount point>/.GIT` is a symlink
to the real common dir, over which the view's is bound (`runtime/inplace.py`), git resolves
its git dir to `<real common dir>/worktrees/<id>`, the only git dir git takes for the current
worktree's (else `git worktree list` names it elsewhere, and `git switch` and `git rebase`
refuse its branch as checked out there), and names the main worktree as it does outside.
`.GIT` is git's in every view (`in_git`), a main worktree's too, where it is a name git refuses
to track (`dotgit.is_dotgit`): like `.git`, the session's own, never diffed nor applied. One
rule whatever the layout, since a reader may not know it (`linked_git`): a linked worktree's
common dir read as a main worktree's content would be a change a whole discard drops.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

# The worktree's own `.git` is the session's own copy-on-write, like every other path; its
# object store is a symlink to the session's own store on disk (`objectdir.py`).
GIT = b".git"
# A linked worktree's view keeps the common dir here, its admin dir at `worktrees/<id>` in it.
GIT_COMMON = b".GIT"
GIT_TOPS = (GIT, GIT_COMMON)
_BELOW = tuple(top + b"/" for top in GIT_TOPS)
# The session's files the view shows as a linked worktree's `.git` and its admin dir's
# `commondir` (in the session dir).
DOTGIT_FILE = b"dotgit"
COMMONDIR_FILE = b"commondir"
_GITDIR = b"gitdir: "


class GitLayout(NamedTuple):
    """Where a view keeps its git state, as view paths: the git dir (HEAD, index, logs/HEAD)
    and the common dir (refs, packed-refs, objects, config); one dir for a main worktree.
    Made by `git_layout` (its files' paths are asked for at each write below them)."""

    dir: bytes
    common: bytes
    head_file: bytes
    index_file: bytes

    def path(self, rel: str) -> str:
        """The view path of git state `rel` as services name it: below the git dir, or
        `common/...` below the common dir (the same dir for a main worktree)."""
        raw = os.fsencode(rel)
        if raw == b"common" or raw.startswith(b"common/"):
            return os.fsdecode(self.common + raw[len(b"common") :])
        return os.fsdecode(self.dir + b"/" + raw)


def git_layout(git_dir: bytes, common: bytes) -> GitLayout:
    return GitLayout(git_dir, common, git_dir + b"/HEAD", git_dir + b"/index")


MAIN = git_layout(GIT, GIT)
# A linked worktree's view before it had git's layout: the common dir below the admin dir.
_OLD_LINKED = git_layout(GIT, GIT + b"/common")


def linked_dirs(root: bytes) -> tuple[bytes, bytes] | None:
    """A linked worktree's admin dir and common dir (`root/.git` a `gitdir:` file), None for a
    main worktree, or when `.git` is anything else."""
    try:
        with open(root + b"/.git", "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not head.startswith(_GITDIR):
        return None
    admin = os.path.join(root, head[len(_GITDIR) :].strip())
    try:
        with open(os.path.join(admin, b"commondir"), "rb") as f:
            common = os.path.normpath(os.path.join(admin, f.read().strip()))
    except OSError:
        return None
    return os.path.normpath(admin), common


def _linked(admin: bytes) -> GitLayout:
    return git_layout(GIT_COMMON + b"/worktrees/" + os.path.basename(admin), GIT_COMMON)


def linked_git(
    root: bytes, session_dir: str, *, writer: bool
) -> tuple[GitLayout, dict[bytes, bytes]]:
    """The view's git layout and the view paths served from elsewhere than below `root`: for
    a linked worktree (`linked_dirs`) `.git` and `commondir` the session's files, `.GIT` the
    common dir. For a main worktree, none. A worktree that is gone (a stand-in with no
    `gitdir:` file) keeps the layout the session's `.git` file recorded.

    Only a `writer` (the daemon, an offline writer) writes the session's two files: a reader
    (`gitsess diff` beside a daemon, one in a run, whose state dir is read-only) finds them
    made, else reads the view as a main worktree's."""
    pointer = os.path.join(os.fsencode(session_dir), DOTGIT_FILE)
    dirs = linked_dirs(root)
    commondir = os.path.join(os.fsencode(session_dir), COMMONDIR_FILE)
    if dirs is None:
        return _recorded(pointer, commondir), {}
    linked = _linked(dirs[0])
    if writer:
        if not os.path.exists(pointer):
            _write(pointer, _GITDIR + linked.dir + b"\n")
        _write(commondir, b"../..\n")
    elif not (os.path.exists(pointer) and os.path.exists(commondir)):
        return MAIN, {}
    return linked, {GIT: pointer, GIT_COMMON: dirs[1], linked.dir + b"/commondir": commondir}


def _recorded(pointer: bytes, commondir: bytes) -> GitLayout:
    """The layout of a linked worktree's session over a stand-in, from the session's files:
    its `.git` file; before git's layout, its `commondir` naming `common` below the admin dir
    (`.git/common` once a daemon had mounted it; see `relayout`, which needs the worktree)."""
    text = _head(pointer)
    if text.startswith(_GITDIR):
        return _linked(text.removeprefix(_GITDIR).strip())
    old = _head(commondir).strip()
    return _OLD_LINKED if old == b"common" or old.endswith(b"/.git/common") else MAIN


def _head(path: bytes) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except OSError:
        return b""


def _write(path: bytes, text: bytes) -> None:
    """`text` as the file `path` (replaced whole, only when it says something else)."""
    try:
        with open(path, "rb") as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    aside = path + b".new"
    with open(aside, "wb") as f:
        f.write(text)
    os.replace(aside, path)


def name_git_dir_at(pointer: bytes, layout: GitLayout, mountpoint: str) -> None:
    """Make the view's `.git` (the session's file `pointer`) name the admin dir by its path at
    the mount point, `<mountpoint>/.GIT/worktrees/<id>`: there, git resolves it as it did the
    relative path; inside a run, where `<mountpoint>/.GIT` is a symlink to the real common dir
    (over which the view's is bound, `runtime/inplace.py`), git finds its git dir at
    `<real common dir>/worktrees/<id>`."""
    at = os.path.join(os.fsencode(os.path.abspath(mountpoint)), layout.dir)
    # (failing, the relative path still leads git to the view's git dir; only the name differs)
    with contextlib.suppress(OSError):
        _write(pointer, _GITDIR + at + b"\n")


def in_git(rel: bytes | None) -> bool:
    """Whether a view path is git's, in any view: the worktree's `.git`, `.GIT` (a linked
    worktree's common dir), or below them: git changes those from outside the session with no
    lower watch to say so, and they are never worktree content."""
    return rel is not None and (rel in GIT_TOPS or rel.startswith(_BELOW))
