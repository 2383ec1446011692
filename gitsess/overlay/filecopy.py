"""Copies of files: a reflink where the filesystem has them, else `copy_file_range` by extents,
which keeps holes. The source is an open descriptor or a path never followed: the stores these
copy from are written by runs, which may put a symlink or a fifo where a file was."""

from __future__ import annotations

import fcntl
import os

FICLONE = 0x40049409


def copy_file(src: str, dest: str) -> None:
    """`src` to a new file `dest`: a reflink where the filesystem has them, else a copy that
    keeps holes. `src` is never followed (a symlink a run put in an object store), nor waited
    on (a fifo)."""
    fd_in = os.open(src, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        copy_open_file(fd_in, dest)
    finally:
        os.close(fd_in)


def copy_open_file(fd_in: int, dest: str | bytes) -> None:
    """The file open at `fd_in` to a new file `dest`, as `copy_file` copies."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    fd_out = os.open(dest, flags, 0o600)
    try:
        try:
            fcntl.ioctl(fd_out, FICLONE, fd_in)
        except OSError:
            _copy_extents(fd_in, fd_out)
    finally:
        os.close(fd_out)


def _copy_extents(fd_in: int, fd_out: int) -> None:
    size = os.fstat(fd_in).st_size
    os.ftruncate(fd_out, size)
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd_in, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            return
        end = os.lseek(fd_in, start, os.SEEK_HOLE)
        while start < end:
            copied = os.copy_file_range(fd_in, fd_out, end - start, start, start)
            if not copied:
                return
            start += copied
        pos = end
