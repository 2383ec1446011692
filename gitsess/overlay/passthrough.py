"""The real files below the worktree's `.git` that a session shares, not copies: which they are
(the shared object store, git's scratch names there) and the calls that reach them."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable
from typing import TypeVar

from pyfuse3 import FUSEError

from gitsess.libc import LIBC
from gitsess.overlay.fdcache import FdCache, same_file
from gitsess.overlay.gitdir import SHARED_OBJECTS, in_git
from gitsess.overlay.nodes import Node

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
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except PermissionError:
        fd = _open_unwritable(path)
    except OSError as e:
        raise FUSEError(e.errno or errno.EIO) from None
    try:
        return call(os.pwrite, fd, buf, off)
    finally:
        os.close(fd)


def _open_unwritable(path: bytes) -> int:
    """Open for writing a file of ours whose mode says read-only: git makes its objects 0444
    and then writes them through the descriptor it created them with, which the kernel let it
    open for writing. The daemon sees no open (see fs.INODE_FH), only the WRITE, so it lends
    itself the owner's write bit for the moment of its own open. (Root needs none of this.)"""
    at = call(os.open, path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(at)
        if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
            raise FUSEError(errno.EACCES)
        reached = f"/proc/self/fd/{at}"
        mode = stat.S_IMODE(st.st_mode)
        call(os.chmod, reached, mode | stat.S_IWUSR)
        try:
            return call(os.open, reached, os.O_WRONLY | os.O_CLOEXEC)
        finally:
            call(os.chmod, reached, mode)
    finally:
        os.close(at)


def fsync(path: bytes) -> None:
    fd = call(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        call(os.fsync, fd)
    finally:
        os.close(fd)


def follows_git(n: Node) -> bool:
    """Whether `n` shows a real object below `.git` (the session's own files excepted): git
    changes those from outside the session, where no worktree watch sees it."""
    return n.passthrough or (in_git(n.worktree_rel) and not (n.upper and n.entries is None))


def scratch(name: bytes) -> bool:
    """Whether a name in the shared object store is one of git's temporary or lock files,
    which git removes or renames; every other file there may be the real repository's only
    copy of an object, so the session can add objects but never take or change one."""
    return name.startswith(b"tmp_") or name.endswith((b".lock", b".tmp"))


def refuse_object_change(n: Node) -> None:
    if not scratch(n.name):
        raise FUSEError(errno.EPERM)


def lasting(rel: bytes | None) -> bool:
    """Whether a file below `.git` never changes while it has that name: a loose object or a
    pack's file, named for their content (git writes them aside and renames them in)."""
    top = next((t + b"/" for t in SHARED_OBJECTS if rel and rel.startswith(t + b"/")), None)
    if rel is None or top is None:
        return False
    below = rel[len(top) :]
    return below.startswith(b"pack/pack-") or (below[2:3] == b"/" and below[:2].isalnum())


def real_flags(flags: int) -> int:
    """Flags for opening a real file: the kernel already did O_CREAT/O_EXCL checks."""
    flags &= ~(os.O_CREAT | os.O_EXCL | os.O_NOCTTY)
    # The kernel gives every WRITE its offset (the end, for an append), and a page of a shared
    # mapping may be written back through any handle of the file: pwrite must honour it.
    return (flags & ~os.O_APPEND) | os.O_CLOEXEC
