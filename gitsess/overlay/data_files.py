"""The session's data files (`<session>/data/<ino>`, files over `INLINE_MAX`) as the view holds
them: open descriptors, what must reach the disk before the next durable commit, the content
a rewind took from files the kernel still holds, and files no node reads. A part of `Tree`
(`tree.py`); what goes into a file is `ContentStore`'s.

Up to 64 data files stay open between requests. A durable commit first `fdatasync`s every data
file written since the last (`sync`). After a crash, a data file longer than its node's
committed size is cut to it (`tidy`), and data files of no node are removed by a thread once
the daemon serves the view (`remove_stray`); their numbers are given to no node until then.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Container, Mapping

from gitsess.durable import fsync_dir
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.fdcache import FdCache
from gitsess.overlay.nodes import Node
from gitsess.overlay.writebehind import WriteBehind

# Data files kept open between requests.
DATA_FDS_OPEN = 64


class DataFiles:
    def __init__(self, store: DeltaStore, *, writer: bool) -> None:
        self.store = store
        self.writer = writer
        self._fds = FdCache(DATA_FDS_OPEN)
        self.unsynced: set[int] = set()  # data files written since the last durable commit
        self.stray: set[int] = set()  # data files of no node, still to remove (see `tidy`)
        # The content a rewind took away from files the kernel holds (see
        # `ContentStore.keep_content`): inline bytes, or a descriptor of the old data file.
        self.kept: dict[int, bytes | int] = {}
        self.write_behind = WriteBehind()

    def open(self, ino: int, *, create: bool) -> int | None:
        """The open data file of node `ino`: None when it has none (it reads as zeros)."""
        fd = self._fds.get(ino)
        if fd is None:
            kept = self.kept.get(ino)
            if isinstance(kept, int):
                return kept
            path = self.store.data_path(ino)
            flags = (os.O_RDWR if self.writer else os.O_RDONLY) | os.O_CLOEXEC
            if create:
                flags |= os.O_CREAT
            try:
                fd = os.open(path, flags, 0o600)
            except FileNotFoundError:
                if not create:
                    return None
                os.makedirs(self.store.data_dir, mode=0o700, exist_ok=True)
                fd = os.open(path, flags, 0o600)
            self._fds.put(ino, fd)
        return fd

    def for_writing(self, ino: int) -> int:
        """The open data file of node `ino`, created empty if it has none yet; saved first
        when a checkpoint needs it as it is."""
        self.store.keep_data(ino)
        fd = self.open(ino, create=True)
        assert fd is not None
        return fd

    def blocks(self, n: Node) -> int:
        """The 512-byte blocks a file of the session's takes: its data file's, holes left out
        (what `du` and a punched hole should show), else as many as its size needs."""
        if n.data != 1 or not stat.S_ISREG(n.mode):
            return (n.size + 511) // 512
        fd = self._fds.get(n.ino)
        try:
            st = os.fstat(fd) if fd is not None else os.stat(self.store.data_path(n.ino))
        except FileNotFoundError:
            return 0
        return st.st_blocks

    def sync(self, live: Container[int]) -> None:
        """Data files to stable storage before the metadata that makes them count (those of
        nodes still `live`)."""
        for ino in self.unsynced:
            if ino not in live:
                continue
            fd = self.open(ino, create=False)
            if fd is not None:
                os.fdatasync(fd)
            self.write_behind.forget(ino)
        if self.unsynced:
            fsync_dir(self.store.data_dir)
        self.unsynced.clear()

    def forget(self, ino: int) -> None:
        """Node `ino` is gone: nothing of its data file is held any more."""
        self.unsynced.discard(ino)
        self.write_behind.forget(ino)
        self._fds.close([ino])

    def let_go(self, *inodes: int) -> None:
        """Drop the content `ContentStore.keep_content` kept of these nodes."""
        for ino in inodes:
            kept = self.kept.pop(ino, None)
            if isinstance(kept, int):
                os.close(kept)

    def tidy(self, nodes: Mapping[int, Node]) -> None:
        """After a crash: find the data files no node reads (`remove_stray` removes those of
        no node at all), and cut bytes written past the size that was committed (a later
        extension of the file must read them as zeros)."""
        for ino in self.store.data_files():
            n = nodes.get(ino)
            if n is None:
                self.stray.add(ino)  # (no stat of its own: a crash may leave thousands)
                continue
            if n.data != 1 or not stat.S_ISREG(n.mode):
                # one an inline file was moving into: it may move there again at any time
                self.store.remove_data([ino])
                continue
            path = self.store.data_path(ino)
            if os.stat(path).st_size > n.size:
                os.truncate(path, n.size)

    def remove_stray(self) -> None:
        """Remove the data files of no node found at load. Thread-safe, and meant for a
        thread: a session that stopped with thousands of deleted files open left gigabytes to
        unlink, and the mount must not wait for that. Until its file is gone, a number is
        given to no node (`NodeTable.allocate`)."""
        for ino in list(self.stray):
            self.store.remove_data([ino])
            self.stray.discard(ino)

    def close_all(self) -> None:
        """Close every data file kept open (their next use opens them anew)."""
        self._fds.close_all()

    def close(self) -> None:
        """Let go of everything: the write-behind thread, kept content, open files."""
        self.write_behind.close()
        self.let_go(*self.kept)
        self._fds.close_all()
