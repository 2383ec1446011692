"""Operations on the real files below the worktree's `.git`, which a session shares, not copies."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import TypeVar

from pyfuse3 import FUSEError

from gitsess.libc import LIBC
from gitsess.overlay.fdcache import FdCache, same_file

T = TypeVar("T")

_AT_FDCWD = -100


def call(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a real-filesystem call, turning its OSError into the FUSEError the kernel expects."""
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        raise FUSEError(e.errno or errno.EIO) from None


def renameat2(old: bytes, new: bytes, flags: int) -> None:
    """rename(2) with RENAME_NOREPLACE / RENAME_EXCHANGE, which os.rename cannot express."""
    if LIBC.renameat2(_AT_FDCWD, old, _AT_FDCWD, new, ctypes.c_uint(flags)) != 0:
        raise FUSEError(ctypes.get_errno())


def chown(path: bytes, uid: int, gid: int) -> None:
    call(os.chown, path, uid, gid, follow_symlinks=False)


# Files below `.git` kept open for reads that come without a handle (fs.INODE_FH).
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


def write(path: bytes, buf: bytes, off: int) -> int:
    """A WRITE that came without a handle: the file the path names now."""
    fd = call(os.open, path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        return call(os.pwrite, fd, buf, off)
    finally:
        os.close(fd)


def fsync(path: bytes) -> None:
    fd = call(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        call(os.fsync, fd)
    finally:
        os.close(fd)
