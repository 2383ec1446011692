"""The real files below the worktree's `.git` that the view shows as they are (the session has
not changed them): git changes them from outside the session too, so they are read anew.

They are read through a descriptor per inode (`ReadFds`, 64 at most), which a read from offset
0 reopens if the path names another file now (git renames new files over old ones): a read
sequence keeps the file it began with. Their entry timeout is 0 and attributes 1 s, so each
open or stat by name is a LOOKUP, which names a new node (no pages) once the file changed.
Nothing here writes: what git writes below `.git` is the session's own, copied up like any
file (its objects are not there at all: `objectdir.py`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TypeVar

from pyfuse3 import FUSEError

from gitsess.overlay.fdcache import FdCache, same_file
from gitsess.overlay.gitdir import in_git
from gitsess.overlay.nodes import Node

T = TypeVar("T")


def call(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a real-filesystem call, turning its OSError into the FUSEError the kernel expects."""
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        raise FUSEError(e.errno or errno.EIO) from None


# Files below `.git` kept open for reads that come without a handle (fs.py's zero-message
# opens).
READ_FDS_OPEN = 64


class ReadFds:
    """Descriptors of real files below `.git`, one per inode of the view, for the READs the
    kernel sends without an OPEN. git replaces most of these files by renaming a new one over
    them, from either side of the view: a read from a file's start (a reader's first, or one
    after the kernel dropped the pages) opens the path anew if it names another file now;
    reads further on keep the file that read began with, as a descriptor would."""

    def __init__(self) -> None:
        self._fds = FdCache(READ_FDS_OPEN)

    def read(self, ino: int, path: bytes, off: int, size: int) -> bytes:
        fd = self._fds.get(ino)
        if fd is None or (off == 0 and _replaced(path, fd)):
            fd = call(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
            self._fds.put(ino, fd)
        return call(os.pread, fd, size, off)

    def forget(self, ino: int) -> None:
        self._fds.close([ino])


def _replaced(path: bytes, fd: int) -> bool:
    """Whether `path` names another file than the one open as `fd` (not when it names none:
    the file went, and its reader reads what it had)."""
    try:
        return not same_file(path, fd)
    except OSError:
        return False


def follows_git(n: Node) -> bool:
    """Whether `n` shows a real object below `.git` (the session's own files excepted): git
    changes those from outside the session, where no lower watch sees it."""
    if n.upper:
        return n.entries is not None and in_git(n.origin)
    return in_git(n.lower)
