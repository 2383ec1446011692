"""The content and attributes a live rewind replaced in files it changed in place (the same
node), shown to the kernel until it has dropped what it held of them.

The kernel holds a file's size and some of its pages from before a rewind, and asks for the
other pages later; it drops pages on a new size, never on new times alone (fs.py,
`auto_inval_data`). So each such file keeps its old bytes (inline, or a descriptor of its old
data file or worktree file: the rewind replaces data files by a rename, never in place) and its
old size and times, and every read and every reply with its attributes shows those: to the
kernel the file has not changed yet. The daemon then invalidates the file's pages and
attributes, `release`s the hold, and invalidates again before the rewind answers: a page read
from the hold before the release is gone after it, and from then on the kernel reads the new
content with the new attributes. A write to the file, or the kernel forgetting it, ends the
hold too. Left open: a process reading the file in the moment between the release and the
second invalidation may join attributes it got from the hold with new bytes.
"""

from __future__ import annotations

import os


class Replaced:
    def __init__(self) -> None:
        # node -> (its size, mtime and ctime then, its bytes or an open descriptor of them)
        self._held: dict[int, tuple[int, int, int, bytes | int]] = {}

    def __contains__(self, ino: int) -> bool:
        return ino in self._held

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, ino: int, size: int, mtime_ns: int, ctime_ns: int, content: bytes | int) -> None:
        self.release(ino)
        self._held[ino] = (size, mtime_ns, ctime_ns, content)

    def attributes(self, ino: int) -> tuple[int, int, int] | None:
        """The old size, mtime and ctime shown for the node; None when it has none held."""
        held = self._held.get(ino)
        return None if held is None else held[:3]

    def read(self, ino: int, off: int, size: int) -> bytes | None:
        """The old content's bytes at `off`; None when the node has none kept."""
        if not self._held:
            return None
        held = self._held.get(ino)
        if held is None:
            return None
        total, _, _, content = held
        if off >= total:
            return b""
        size = min(size, total - off)
        if isinstance(content, bytes):
            buf = content[off : off + size]
        else:
            buf = os.pread(content, size, off)
        # A data file shorter than the size read as zeros then, as it does now.
        return buf if len(buf) == size else buf + bytes(size - len(buf))

    def release(self, ino: int) -> None:
        """The kernel dropped what it held of the node, or the node changed: no old content."""
        if not self._held:
            return
        held = self._held.pop(ino, None)
        if held is not None and isinstance(held[3], int):
            os.close(held[3])

    def release_all(self) -> list[int]:
        """Every hold ended; returns the nodes that had one."""
        inodes = list(self._held)
        for ino in inodes:
            self.release(ino)
        return inodes
