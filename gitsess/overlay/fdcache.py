"""Open file descriptors kept between requests, a bounded number of them."""

from __future__ import annotations

import os
from collections.abc import Iterable


class FdCache:
    """Descriptors by key (an inode number), `size` at most, least recently used first: the
    oldest is closed to make room for a new one."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._fds: dict[int, int] = {}

    def get(self, key: int) -> int | None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            self._fds[key] = fd
        return fd

    def put(self, key: int, fd: int) -> None:
        self.close([key])
        if len(self._fds) >= self._size:
            os.close(self._fds.pop(next(iter(self._fds))))
        self._fds[key] = fd

    def close(self, keys: Iterable[int]) -> None:
        for key in keys:
            fd = self._fds.pop(key, None)
            if fd is not None:
                os.close(fd)

    def close_all(self) -> None:
        self.close(list(self._fds))


def same_file(path: bytes, fd: int) -> bool:
    """Whether `path` names the file open as `fd` (OSError when it names nothing)."""
    st = os.stat(path)
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
