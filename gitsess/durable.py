"""Making a directory's entries durable: what a rename or a new file needs after its data."""

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
