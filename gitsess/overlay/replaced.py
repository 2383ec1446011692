"""The content a live rewind replaced in files it changed in place (the same node), answered to
the kernel's reads until the kernel has the node's new attributes.

The kernel holds a file's size and some of its pages from before a rewind, and asks for the
other pages later: answered from the new content, a read would join old pages (or the old
size) with new bytes. So each such file keeps its old bytes (inline, or a descriptor of its
old data file or worktree file: the rewind replaces data files by a rename, never in place)
until the kernel is told its new attributes (a GETATTR, a LOOKUP, any reply that carries
them). That reply has a new size or mtime, so the kernel drops the pages it holds
(FUSE_AUTO_INVAL_DATA); from then on it asks for everything again and gets the new content.
A write to the file, or the kernel forgetting it, ends the old content too. Left open: two
processes reading one such file at once, one of them asking its attributes while the other is
between its size and its read (that one then joins the old size with new bytes).
"""

from __future__ import annotations

import os


class Replaced:
    def __init__(self) -> None:
        # node -> (its size then, its bytes or an open descriptor of them)
        self._held: dict[int, tuple[int, bytes | int]] = {}

    def __contains__(self, ino: int) -> bool:
        return ino in self._held

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, ino: int, size: int, content: bytes | int) -> None:
        self.told(ino)
        self._held[ino] = (size, content)

    def read(self, ino: int, off: int, size: int) -> bytes | None:
        """The old content's bytes at `off`; None when the node has none kept."""
        if not self._held:
            return None
        held = self._held.get(ino)
        if held is None:
            return None
        total, content = held
        if off >= total:
            return b""
        size = min(size, total - off)
        if isinstance(content, bytes):
            buf = content[off : off + size]
        else:
            buf = os.pread(content, size, off)
        # A data file shorter than the size read as zeros then, as it does now.
        return buf if len(buf) == size else buf + bytes(size - len(buf))

    def told(self, ino: int) -> None:
        """The kernel has the node's new attributes, or the node changed: no old content."""
        if not self._held:
            return
        held = self._held.pop(ino, None)
        if held is not None and isinstance(held[1], int):
            os.close(held[1])

    def clear(self) -> None:
        for ino in list(self._held):
            self.told(ino)
