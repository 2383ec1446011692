"""The C library, for the system calls the os module lacks: mount, unshare, renameat2,
inotify, sync_file_range, fallocate (os.posix_fallocate has no mode)."""

from __future__ import annotations

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str = "") -> int:
    """`result` of a call that returns -1 and sets errno on failure; raises that as OSError,
    its message led by `what` when given."""
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}" if what else os.strerror(err))
    return result


LIBC.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2) with its FALLOC_FL_* `mode`."""
    check(LIBC.fallocate(fd, mode, offset, length))
