"""Operations on the real files below the worktree's `.git`, which a session shares, not copies."""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from typing import TypeVar

from pyfuse3 import FUSEError

from gitsess.libc import LIBC

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
