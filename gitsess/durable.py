"""Making writes last: a file written whole or not at all (`write_aside`), a directory's entries
after a rename or a new file, and telling a full disk from other I/O errors."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import BinaryIO

# A file written aside is hidden, in its target's directory (so that the rename stays in one
# file system) and names its writer, so that what a killed writer left is found and removed.
_ASIDE = re.compile(rb"\..+\.gitsess-(\d+)\.tmp")


def aside_name(path: str) -> str:
    """The name a file is written under before it is renamed over `path`."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.gitsess-{os.getpid()}.tmp")


def aside_writer(name: str | bytes) -> int | None:
    """The pid that wrote `name` aside (a name of `aside_name`'s), None for any other name."""
    found = _ASIDE.fullmatch(os.fsencode(name))
    return None if found is None else int(found.group(1))


@contextlib.contextmanager
def write_aside(
    path: str | os.PathLike[str], mode: int | None = None, *, durable: bool = False
) -> Iterator[BinaryIO]:
    """Write the file at `path` whole or not at all: the block writes to the file this yields,
    renamed over `path` when the block ends without an error, so that a reader sees the old
    file or the new one; on an error it is removed and `path` is left as it was. `mode`: the
    new file's permissions exactly (None: 0o666 less the umask). `durable`: its data and its
    name survive a crash once this returns."""
    target = os.fspath(path)
    tmp = aside_name(target)
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
        0o600 if mode is not None else 0o666,
    )
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)  # exactly `mode`, whatever the umask
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(os.path.dirname(target) or ".")


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
