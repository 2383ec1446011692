"""Making writes last: a directory's entries after a rename or a new file, and telling a full
disk from other I/O errors."""

from __future__ import annotations

import os


def fsync_dir(path: str | bytes | os.PathLike[str]) -> None:
    """fsync the directory at `path`, so that the names created, renamed or removed in it
    survive a crash (the files' own data needs their own fsync first)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Free bytes below which a write error is taken for a full disk: SQLite reports one as "disk
# I/O error" when its WAL index cannot grow, not only as "database or disk is full".
NEARLY_FULL = 1 << 20


def nearly_full(path: str | os.PathLike[str]) -> bool:
    """Whether the file system holding `path` (a directory) has next to no space left."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL
