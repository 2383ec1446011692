"""The attributes of the merged view's nodes: what getattr answers (a lower node's `lstat`, an
upper node's row), mode, owner, times and extended attributes changed, with copy-up. A part of
`Tree` (`tree.py`).

In the object store below `.git`, a metadata change copies the bytes too (`_own_metadata`: real
git may remove the lower file later, repacking). An access ACL is kept as the mode bits it
gives (`acl.py`) when that says it all, as on a local filesystem. A chmod, chown, truncate,
setxattr or removexattr that names its process (`by`) is recorded (`ChangeRecorder`).
"""

from __future__ import annotations

import errno
import os
import time

from gitsess.overlay import acl
from gitsess.overlay.content_store import ContentStore
from gitsess.overlay.data_files import DataFiles
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import Attr, Node, err
from gitsess.overlay.recorder import ChangeRecorder

# The size a directory the session made shows, as on ext4 (one block).
DIR_SIZE = 4096


class Attributes:
    def __init__(
        self,
        table: NodeTable,
        content: ContentStore,
        data: DataFiles,
        lower: LowerLayer,
        recorder: ChangeRecorder,
    ) -> None:
        self.table = table
        self.content = content
        self.data = data
        self.lower = lower
        self.recorder = recorder
        self.pending = table.pending

    # ---------------------------------------------------------------- reading them

    def lower_stat(self, n: Node) -> tuple[os.stat_result, int] | None:
        """For a node of the worktree's, its lstat (the one taken when it was found, else a
        fresh one) and its link count (0 once unlinked here while open); None for a node of
        the session's own. ENOENT when the worktree's object is gone."""
        if n.upper:
            return None
        st, n.st = n.st or self.lower.stat(n.lower or b""), None
        if st is None:
            raise err(errno.ENOENT)
        return st, st.st_nlink if n.nlink else 0

    def getattr(self, n: Node) -> Attr:
        lower = self.lower_stat(n)
        if lower is not None:
            st, nlink = lower
            return Attr(
                n.ino,
                st.st_mode,
                nlink,
                st.st_uid,
                st.st_gid,
                st.st_rdev,
                st.st_size,
                st.st_blocks,
                st.st_atime_ns,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
        if n.is_dir:
            size = n.size or DIR_SIZE  # one the session made
            nlink, blocks = 2 + self.table.subdirs(n), (size + 511) // 512
        else:
            nlink, size, blocks = n.nlink, n.size, self.data.blocks(n)
        return Attr(
            n.ino,
            n.mode,
            nlink,
            n.uid,
            n.gid,
            n.rdev,
            size,
            blocks,
            n.atime_ns,
            n.mtime_ns,
            n.ctime_ns,
        )

    def lower_size(self, n: Node) -> int | None:
        """The size of what `n` shows of the worktree (a directory's merges), None if nothing."""
        rel = n.worktree_rel
        st = None if rel is None else self.lower.stat(rel)
        return None if st is None else st.st_size

    # ---------------------------------------------------------------- changing them

    def setattr(
        self,
        n: Node,
        *,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        size: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
        by: int | None = None,
    ) -> None:
        self._setattr(n, mode, uid, gid, size, atime_ns, mtime_ns)
        if by is None:
            return
        path = self.table.path_of(n)
        self.recorder.touched(path)
        for op, on in (
            ("truncate", size is not None),
            ("chmod", mode is not None),
            ("chown", uid is not None or gid is not None),
        ):
            if on:
                self.recorder.audited(op, path, by)

    def _setattr(
        self,
        n: Node,
        mode: int | None,
        uid: int | None,
        gid: int | None,
        size: int | None,
        atime_ns: int | None,
        mtime_ns: int | None,
    ) -> None:
        self.table.check_writable()
        if not n.upper and (mode, uid, gid, size, atime_ns, mtime_ns) == (None,) * 6:
            # The kernel flushing a ctime it changed itself (unlink, link): nothing to keep.
            return
        if size is not None:
            if n.is_dir:
                raise err(errno.EISDIR)
            self.content.truncate(n, size)
        self._own_metadata(n)
        now = time.time_ns()
        if mode is not None:
            n.mode = (n.mode & ~0o7777) | (mode & 0o7777)
        if uid is not None:
            n.uid = uid
        if gid is not None:
            n.gid = gid
        if atime_ns is not None:
            n.atime_ns = atime_ns
        if mtime_ns is not None:
            n.mtime_ns = mtime_ns
        n.ctime_ns = now
        self.pending.nodes.add(n.ino)

    def _own_metadata(self, n: Node) -> None:
        """Copy up a node whose metadata the session changes."""
        self.table.make_upper(n)

    # ---------------------------------------------------------------- extended attributes

    def getxattr(self, n: Node, name: bytes) -> bytes:
        table = self._xattr_table(n)
        if name not in table:
            raise err(errno.ENODATA)
        return table[name]

    def listxattr(self, n: Node) -> list[bytes]:
        return sorted(self._xattr_table(n))

    def setxattr(self, n: Node, name: bytes, value: bytes, *, by: int | None = None) -> None:
        self._setxattr(n, name, value)
        if by is not None:
            self.recorder.audited("setxattr", self.table.path_of(n), by)

    def _setxattr(self, n: Node, name: bytes, value: bytes) -> None:
        self.table.check_writable()
        if name == acl.ACCESS:
            bits, minimal = acl.mode_bits(value)
            self._setattr(n, (n.mode & 0o7000) | bits, None, None, None, None, None)
            if minimal:  # the mode says it all: nothing kept, as on a local filesystem
                if name in self._xattr_table(n):
                    self._removexattr(n, name)
                return
        self._own_metadata(n)
        if n.xattrs is None:
            n.xattrs = {}
        n.xattrs[name] = value
        n.ctime_ns = time.time_ns()
        self.pending.xattrs[(n.ino, name)] = value
        self.pending.nodes.add(n.ino)

    def removexattr(self, n: Node, name: bytes, *, by: int | None = None) -> None:
        self._removexattr(n, name)
        if by is not None:
            self.recorder.audited("removexattr", self.table.path_of(n), by)

    def _removexattr(self, n: Node, name: bytes) -> None:
        self.table.check_writable()
        if name not in self._xattr_table(n):
            raise err(errno.ENODATA)
        self._own_metadata(n)
        assert n.xattrs is not None
        del n.xattrs[name]
        n.ctime_ns = time.time_ns()
        self.pending.xattrs[(n.ino, name)] = None
        self.pending.nodes.add(n.ino)

    def _xattr_table(self, n: Node) -> dict[bytes, bytes]:
        if n.upper:
            return n.xattrs or {}
        assert n.lower is not None
        return self.lower.xattrs(n.lower)
