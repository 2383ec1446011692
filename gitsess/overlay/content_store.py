"""File contents of the merged view: copy-up of data, reads and writes (inline or in a data
file), truncate, fallocate, symlink targets, and the old content a rewind leaves to files the
kernel holds. A part of `Tree` (`tree.py`).

Data is copied (`sendfile` from the worktree's file) only on the first data change, not at all
for `O_TRUNC` or a truncate to 0. A file with `data = 0` reads from its origin, `1` from its
data file `<session>/data/<ino>` (`DataFiles`), `2` from a row of `inline_data` (up to
`INLINE_MAX`; one that grows past it moves to a data file for good).

Data is written at once with `pwrite`; a short write takes back what it added past the end and
answers `ENOSPC`. fallocate takes the modes ext4 does, on the data file, to which an inline or
worktree file's bytes move first.

A node a live rewind removes keeps its old content while the kernel holds it (`keep_content`):
it reads whole as it was, as an open unlinked file does, and refuses writes. One it changes in
place shows its old content and attributes until the daemon has dropped what the kernel held
of it (`hold_replaced`, `replaced.py`).

A write, truncate or fallocate that names its process (`by`) is recorded (`ChangeRecorder`).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterable

from gitsess import libc
from gitsess.overlay import longpath
from gitsess.overlay.data_files import DataFiles
from gitsess.overlay.delta import INLINE
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import Node, err
from gitsess.overlay.recorder import ChangeRecorder
from gitsess.overlay.replaced import Replaced

# fallocate(2) modes served (those the kernel passes on to a FUSE filesystem)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
# Files up to this size keep their bytes in delta.db (see store.INLINE), committed with their
# metadata; a file that grows past it moves to a data file for good.
INLINE_MAX = 16 * 1024


class ContentStore:
    def __init__(
        self, table: NodeTable, data: DataFiles, lower: LowerLayer, recorder: ChangeRecorder
    ) -> None:
        self.table = table
        self.data = data
        self.lower = lower
        self.recorder = recorder
        self.pending = table.pending
        # The old content of files a rewind changed in place (see `hold_replaced`).
        self.replaced = Replaced()

    # ---------------------------------------------------------------- copy-up

    def ensure_data(self, n: Node, *, keep: int | None = None) -> None:
        """Copy a file's bytes into its data file on its first data change.

        `keep` bounds how much of the lower file matters (0 for O_TRUNC: nothing is copied).
        """
        if n.ino in self.data.kept:
            raise err(errno.ESTALE)  # a file a rewind removed (see `keep_content`)
        self.replaced.release(n.ino)  # (a file a rewind changed: what it had is no longer read)
        self.table.make_upper(n)
        if n.data:
            return
        assert n.origin is not None
        want = n.size if keep is None else min(keep, n.size)
        if want <= INLINE_MAX:
            content = b""
            if want:
                with longpath.call(open, self.lower.path(n.origin), "rb", buffering=0) as f:
                    content = f.read(want)
            self.pending.inline[n.ino] = content
            n.data = INLINE
            n.size = len(content)
            self.pending.nodes.add(n.ino)
            return
        fd = self.data.for_writing(n.ino)
        os.ftruncate(fd, 0)
        copied = 0
        if want:
            src = longpath.call(os.open, self.lower.path(n.origin), os.O_RDONLY | os.O_CLOEXEC)
            try:
                while copied < want:
                    sent = os.sendfile(fd, src, copied, want - copied)
                    if not sent:
                        break
                    copied += sent
            finally:
                os.close(src)
        n.data = 1
        n.size = copied
        self.data.unsynced.add(n.ino)
        self.pending.nodes.add(n.ino)

    # ---------------------------------------------------------------- reading

    def worktree_fd(self, n: Node) -> int | None:
        """The open worktree file that `n`'s content is read from; None when the content is
        the session's own."""
        return None if n.upper and n.data else self.lower.fd(n)

    def read(self, n: Node, off: int, size: int) -> bytes:
        fd = self.worktree_fd(n)
        if fd is not None:
            return os.pread(fd, size, off)
        if off >= n.size:
            return b""
        size = min(size, n.size - off)
        if n.data == INLINE:
            buf = self.inline(n)[off : off + size]
        else:
            data_fd = self.data.open(n.ino, create=False)
            if data_fd is None and not self.data.writer:
                # A file of some size always has its data file (a truncate that grows one
                # makes it): the daemon removed it after a commit this reader's snapshot
                # predates. Zeros here were once committed by an apply as the file's content.
                raise OSError(
                    errno.ESTALE,
                    f"{self.table.path_of(n).decode(errors='replace')} changed in the "
                    "session while it was read; try again",
                )
            buf = b"" if data_fd is None else os.pread(data_fd, size, off)
        # Past the end of a sparse data file (a file extended by truncate): zeros.
        return buf if len(buf) == size else buf + bytes(size - len(buf))

    def inline(self, n: Node) -> bytes:
        """An inline file's bytes (up to its size; any shorter, the rest reads as zeros)."""
        if n.ino in self.pending.inline:
            return self.pending.inline[n.ino] or b""
        if not n.size:
            return b""  # a file just made, say: no query of delta.db for its first write
        kept = self.data.kept.get(n.ino)
        return kept if isinstance(kept, bytes) else self.table.store.inline(n.ino)

    def readlink(self, n: Node) -> bytes:
        if n.upper:
            if n.target is None:
                raise err(errno.EINVAL)
            return n.target
        assert n.lower is not None
        try:
            target = self.lower.readlink(n.lower)
        except OSError as e:
            raise err(e.errno or errno.EIO) from None
        # What the kernel now keeps for this inode (`cache_symlinks`, fs.py): a lookup that
        # finds the worktree's symlink saying something else gives the name a new node
        # (`NodeTable._lower_node`).
        n.target = target
        return target

    def opened(self, n: Node) -> None:
        n.opens += 1

    def released(self, n: Node) -> None:
        n.opens -= 1
        self.table.maybe_drop(n)

    # ---------------------------------------------------------------- writing

    def write(self, n: Node, off: int, buf: bytes, *, by: int | None = None) -> int:
        written = self._write(n, off, buf)
        if by is not None:
            self.recorder.wrote(n, by, written)
        return written

    def _write(self, n: Node, off: int, buf: bytes) -> int:
        self.table.check_writable()
        self.ensure_data(n)
        if n.data == INLINE and off + len(buf) > INLINE_MAX:
            self._to_data_file(n)
        if n.data == INLINE:
            content = bytearray(self.inline(n))
            if len(content) < off:
                content.extend(bytes(off - len(content)))
            content[off : off + len(buf)] = buf
            self.pending.inline[n.ino] = bytes(content)
            return self._written(n, off, len(buf))
        fd = self.data.for_writing(n.ino)
        written = os.pwrite(fd, buf, off)
        if written < len(buf):
            # Only a full disk writes short: take back what it added past the file's end.
            if off + written > n.size:
                os.ftruncate(fd, max(n.size, off))
            raise err(errno.ENOSPC)
        self.data.unsynced.add(n.ino)
        self.data.write_behind.wrote(n.ino, fd, written)
        return self._written(n, off, written)

    def _written(self, n: Node, off: int, written: int) -> int:
        n.size = max(n.size, off + written)
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self.pending.nodes.add(n.ino)
        return written

    def truncate(self, n: Node, size: int, *, by: int | None = None) -> None:
        self.table.check_writable()
        if not stat.S_ISREG(n.mode):
            raise err(errno.EINVAL)
        self.ensure_data(n, keep=size)
        if n.data == INLINE and size > INLINE_MAX:
            self._to_data_file(n)
        if n.data == INLINE:
            content = self.inline(n)
            if len(content) > size:
                self.pending.inline[n.ino] = content[:size]
        else:
            self.table.store.keep_data(n.ino)
            fd = self.data.open(n.ino, create=size > 0)
            if fd is not None:
                os.ftruncate(fd, size)
                self.data.unsynced.add(n.ino)
        n.size = size
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self.pending.nodes.add(n.ino)
        if by is not None:
            self.recorder.changed("truncate", self.table.path_of(n), by)

    def fallocate(
        self, n: Node, mode: int, offset: int, length: int, *, by: int | None = None
    ) -> None:
        """fallocate(2) of a file: its data file's (an inline or worktree file's bytes move
        into one first), which is sparse anyway, so a hole punched there takes no room."""
        self.table.check_writable()
        served = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE
        punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE  # a hole never changes the size
        if mode & ~served or (mode & FALLOC_FL_PUNCH_HOLE and mode != punch):
            raise err(errno.EOPNOTSUPP)
        if offset < 0 or length <= 0:
            raise err(errno.EINVAL)
        if not stat.S_ISREG(n.mode):
            raise err(errno.EISDIR if n.is_dir else errno.ENODEV)
        self.ensure_data(n)
        if n.data == INLINE:
            self._to_data_file(n)
        libc.fallocate(self.data.for_writing(n.ino), mode, offset, length)
        if not mode & FALLOC_FL_KEEP_SIZE:
            n.size = max(n.size, offset + length)
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self.data.unsynced.add(n.ino)
        self.pending.nodes.add(n.ino)
        if by is not None:
            self.recorder.changed("fallocate", self.table.path_of(n), by)

    def _to_data_file(self, n: Node) -> None:
        """Move an inline file that grows past INLINE_MAX into a data file."""
        content = self.inline(n)
        fd = self.data.for_writing(n.ino)
        os.ftruncate(fd, 0)
        if os.pwrite(fd, content, 0) < len(content):
            os.ftruncate(fd, 0)
            raise err(errno.ENOSPC)
        n.data = 1
        self.pending.inline[n.ino] = None
        self.data.unsynced.add(n.ino)
        self.pending.nodes.add(n.ino)

    # ---------------------------------------------------------------- around a rewind

    def keep_content(self, inodes: Iterable[int]) -> list[int]:
        """Before a rewind that removes these nodes: the content of those the kernel holds,
        so that each reads whole as it was, as an open unlinked file does, until the kernel
        forgets it. Until its invalidation a process may still reach it by a name it looked up
        before. A descriptor opened now keeps the old bytes: the rewind renames data files.
        Returns the nodes it kept content of (for `DataFiles.let_go`, should the rewind not
        happen)."""
        kept = []
        for ino in inodes:
            n = self.table.nodes.get(ino)
            if n is None or not (n.lookups or n.opens) or not stat.S_ISREG(n.mode):
                continue
            if not n.upper or n.origin is not None or not n.data or ino in self.data.kept:
                continue
            if n.data == INLINE:
                self.data.kept[ino] = self.inline(n)
            else:
                path = self.table.store.data_path(ino)
                try:
                    self.data.kept[ino] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    self.data.kept[ino] = b""  # no data file: it reads as zeros, as it did
            kept.append(ino)
        return kept

    def hold_replaced(self, inodes: Iterable[int]) -> list[int]:
        """Before a rewind that changes these nodes in place: the content and attributes of the
        files the kernel holds, shown until it has dropped them (see overlay/replaced.py).
        Returns the nodes held (for `replaced.release`, should the rewind not happen)."""
        held = []
        for ino in inodes:
            n = self.table.nodes.get(ino)
            if n is None or not (n.lookups or n.opens) or not stat.S_ISREG(n.mode):
                continue
            if ino in self.data.kept or ino in self.replaced:
                continue  # (removed by the rewind; or held by an earlier one not yet answered)
            content: bytes | int
            times = n.mtime_ns, n.ctime_ns
            if n.upper and n.data == INLINE:
                content, size = self.inline(n), n.size
            elif n.upper and n.data:
                try:
                    content = os.open(self.table.store.data_path(ino), os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    content = b""  # no data file: it reads as zeros, as it did
                except OSError:
                    continue  # out of descriptors: it reads as the rewind left it, not whole
                size = n.size
            else:
                rel = n.worktree_rel
                try:
                    if rel is None:
                        continue
                    content = longpath.call(
                        os.open, self.lower.path(rel), os.O_RDONLY | os.O_CLOEXEC
                    )
                except OSError:
                    continue  # gone from the worktree (or out of descriptors): not kept
                if n.upper:
                    size = n.size
                else:
                    st = os.fstat(content)
                    size, times = st.st_size, (st.st_mtime_ns, st.st_ctime_ns)
            self.replaced.hold(ino, size, *times, content)
            held.append(ino)
        return held
