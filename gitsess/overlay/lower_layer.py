"""The lower layer as the view reads it: the real worktree's paths, `lstat`s, listings, open
files, links and extended attributes. A part of `Tree` (`tree.py`); nothing here changes the
worktree.

A view path is a path below the worktree's root, except in a linked worktree, whose view
`.git` is a file of the session's and whose `.GIT` is the repository's common dir
(`gitdir.linked_git`), found by name, never listed. Hidden paths (the state dir) are left out
of listings. Names longer than the worktree's `f_namemax` are `ENAMETOOLONG` everywhere, since
FUSE checks only its own limit: a name only the session holds must still fit there when it is
applied.

Until the lower watch is in place (`watched`), nothing closes the descriptor of a worktree file
that was replaced or removed, so each read checks that its path still names it; below `.git`,
which is never watched, always.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

from gitsess.overlay import longpath, objectdir
from gitsess.overlay.fdcache import FdCache, same_file
from gitsess.overlay.gitdir import GIT_COMMON, in_git, linked_git
from gitsess.overlay.nodes import Node, err, join

NAME_MAX = 255
# Lower directory listings kept between readdirs (about 100 bytes a name).
LISTINGS_KEPT = 20_000
# Worktree files kept open between reads. Without OPEN requests (fs.py's zero-message opens)
# nothing says when a reader is done with a file, so its descriptor stays until it is among the
# oldest.
LOWER_FDS_OPEN = 256


def _name_max(root: bytes) -> int:
    """The longest name the worktree's filesystem takes; POSIX's usual NAME_MAX when the
    worktree is gone (`ls` still counts what such a session holds)."""
    try:
        return os.statvfs(root).f_namemax
    except OSError:
        return NAME_MAX


class LowerLayer:
    def __init__(
        self, lower_root: str, session_dir: str, hidden: set[bytes], *, writer: bool
    ) -> None:
        """Only a `writer` makes what the view needs in the session dir (its git files and
        object store): a reader finds them made (`gitdir.linked_git`)."""
        self.root = os.fsencode(lower_root).rstrip(b"/") or b"/"
        self.hidden = set(hidden)
        # Where the view keeps its git state, and the view paths served from elsewhere than
        # below `root` (a linked worktree's `.git` file and git dirs), longest first.
        self.git, redirects = linked_git(self.root, session_dir, writer=writer)
        self.redirects = dict(sorted(redirects.items(), key=lambda kv: -len(kv[0])))
        # (top, top + "/", where it is): asked for every request below `.git` and `.GIT`
        self._redirected = [(top, top + b"/", there) for top, there in self.redirects.items()]
        if self.redirects:
            self.hidden.add(GIT_COMMON + b"/gitsess")
        # The view's object store is a symlink to the session's own (`objectdir.py`), which
        # borrows the real one, found where the view's was.
        self.session = os.fsencode(session_dir)
        objects_at = objectdir.view_path(self.git)
        if writer:
            link = objectdir.prepare(self.session, self.path(objects_at))
        else:
            link = os.path.join(self.session, objectdir.LINK)
        self._redirected.insert(0, (objects_at, objects_at + b"/", link))
        # (the real listing of its directory names it a directory: `listing`)
        self._objects_in, _, self._objects_name = objects_at.rpartition(b"/")
        self.name_max = _name_max(self.root)
        # Whether the lower watch is in place (see `LowerChanges.catch_up`).
        self.watched = False
        self._listings: dict[bytes, tuple[int, list[tuple[bytes, bool]]]] = {}
        self._fds = FdCache(LOWER_FDS_OPEN)

    def path(self, rel: bytes) -> bytes:
        """Where the lower object of view path `rel` is on disk."""
        if self._redirected and in_git(rel):
            for top, below, there in self._redirected:
                if rel == top or rel.startswith(below):
                    return there + rel[len(top) :]
        return self.root + b"/" + rel if rel else self.root

    def stat(self, rel: bytes) -> os.stat_result | None:
        """The worktree object's `lstat`, None when there is none."""
        try:
            return longpath.lstat(self.path(rel))
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None

    def check_name(self, name: bytes) -> None:
        if len(name) > self.name_max:
            raise err(errno.ENAMETOOLONG)

    def listing(self, rel: bytes) -> list[tuple[bytes, bool]]:
        """A lower directory's names, sorted, with their kinds; rescanned only when the
        directory's mtime moved (the lower watch drops it too, for changes within one
        clock tick)."""
        path = self.path(rel)
        try:
            mtime = longpath.lstat(path).st_mtime_ns
            cached = self._listings.get(rel)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            listing = sorted(
                (name, is_dir)
                for name, is_dir in longpath.entries(path)
                if join(rel, name) not in self.hidden
            )
        except (FileNotFoundError, NotADirectoryError):
            return []
        if rel == self._objects_in:
            # the object store the worktree lists is the session's symlink in the view
            listing = [(name, is_dir and name != self._objects_name) for name, is_dir in listing]
        if len(self._listings) >= LISTINGS_KEPT:
            self._listings.clear()
        self._listings[rel] = (mtime, listing)
        return listing

    def forget_listing(self, rel: bytes | None = None) -> None:
        """Drop the listing kept of `rel` (of every directory for None)."""
        if rel is None:
            self._listings.clear()
        else:
            self._listings.pop(rel, None)

    def fd(self, n: Node) -> int:
        """An open descriptor of the worktree file `n` shows."""
        fd = self._fds.get(n.ino)
        rel = n.worktree_rel
        assert rel is not None
        if fd is not None and self.watched and not in_git(rel):
            return fd
        path = self.path(rel)
        if fd is not None and _names(path, fd):
            return fd
        fd = longpath.call(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
        self._fds.put(n.ino, fd)
        return fd

    def close(self, inodes: Iterable[int]) -> None:
        """Close the worktree descriptors of these nodes: their next read opens the file anew."""
        self._fds.close(inodes)

    def close_all(self) -> None:
        self._fds.close_all()

    def readlink(self, rel: bytes) -> bytes:
        return longpath.call(os.readlink, self.path(rel))

    def xattrs(self, rel: bytes) -> dict[bytes, bytes]:
        return longpath.call(_xattrs, self.path(rel))


def _names(path: bytes, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not when it names none)."""
    try:
        return longpath.call(same_file, path, fd)
    except OSError:
        return False


def _xattrs(path: bytes) -> dict[bytes, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    out: dict[bytes, bytes] = {}
    for name in names:
        try:
            out[os.fsencode(name)] = os.getxattr(path, name, follow_symlinks=False)
        except OSError:
            continue
    return out
