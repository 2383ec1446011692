"""The names of the merged view: create, mknod, mkdir, symlink, link, unlink, rmdir, rename. A
part of `Tree` (`tree.py`).

Deleting a lower name writes a whiteout (`NodeTable.commit` holds those below a directory being
emptied). Renaming or hard-linking a lower file copies its data, so the session's file no
longer changes with the worktree's; renaming a lower directory makes it a merged directory
under the new name, still merging with the old lower path. `renameat2` takes
`RENAME_NOREPLACE`, `RENAME_EXCHANGE` and `RENAME_WHITEOUT` as ext4 does. An operation that
names its process (`by`) is recorded (`ChangeRecorder`).

Below `.git`: the state dir is a sealed node (never listed, found as an empty directory nobody
can change, and its parent is never empty); the first change to HEAD, the index or the branch
ref makes all three the session's own (`gitunit`, through the hooks `Tree` sets); and a real
fan-out directory of the object store that the session removes is replaced by a new one hiding
only the names it holds then, so real objects written there later are still read.
"""

from __future__ import annotations

import errno
import stat
import time
from collections.abc import Callable

from gitsess.overlay.attributes import Attributes
from gitsess.overlay.content_store import ContentStore
from gitsess.overlay.delta import INLINE
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import Node, err, join
from gitsess.overlay.recorder import ChangeRecorder

# renameat2(2) flags
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4  # leaves an overlay whiteout (a character device 0:0) at the old name


def _no_hook(parent: Node, name: bytes) -> None:
    return None


class Namespace:
    def __init__(
        self,
        table: NodeTable,
        content: ContentStore,
        attrs: Attributes,
        lower: LowerLayer,
        recorder: ChangeRecorder,
    ) -> None:
        self.table = table
        self.nodes = table.nodes
        self.content = content
        self.attrs = attrs
        self.lower = lower
        self.recorder = recorder
        self.pending = table.pending
        # Called before a name in a directory is made, removed or renamed, and after a file
        # was renamed in (the git unit's hooks).
        self.before_name_change: Callable[[Node, bytes], None] = _no_hook
        self.after_rename: Callable[[Node, bytes], None] = _no_hook

    # ---------------------------------------------------------------- making names

    def create(
        self,
        parent: int,
        name: bytes,
        mode: int,
        uid: int,
        gid: int,
        rdev: int = 0,
        *,
        by: int | None = None,
    ) -> Node:
        n = self._make(parent, name, mode, uid, gid, rdev)
        self._record("create", n, by)
        return n

    def mknod(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int, *, by: int
    ) -> Node:
        n = self._make(parent, name, mode, uid, gid, rdev)
        self._record("mknod", n, by)
        return n

    def mkdir(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, *, by: int | None = None
    ) -> Node:
        n = self._make(parent, name, stat.S_IFDIR | (mode & 0o7777), uid, gid, 0)
        self._record("mkdir", n, by, is_dir=True)
        return n

    def _make(self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int) -> Node:
        self.lower.check_name(name)
        p = self._writable_dir(parent)
        self.before_name_change(p, name)
        if self.table.find(parent, name) is not None:
            raise err(errno.EEXIST)
        n = self._new_node(p, name, mode, uid, gid)
        n.rdev = rdev
        if stat.S_ISREG(mode):
            n.data = INLINE
        n.lookups += 1
        return n

    def symlink(
        self, parent: int, name: bytes, target: bytes, uid: int, gid: int, *, by: int | None = None
    ) -> Node:
        self.lower.check_name(name)
        p = self._writable_dir(parent)
        self.before_name_change(p, name)
        if self.table.find(parent, name) is not None:
            raise err(errno.EEXIST)
        n = self._new_node(p, name, stat.S_IFLNK | 0o777, uid, gid)
        n.target = target
        n.size = len(target)
        n.lookups += 1
        if by is not None:
            self.recorder.changed("symlink", self.table.path_of(n), by, target=target)
        return n

    def link(self, ino: int, new_parent: int, new_name: bytes, *, by: int | None = None) -> Node:
        self.lower.check_name(new_name)
        p = self._writable_dir(new_parent)
        n = self.table.node(ino)
        if n.is_dir:
            raise err(errno.EPERM)
        self.before_name_change(p, new_name)
        if self.table.find(new_parent, new_name) is not None:
            raise err(errno.EEXIST)
        source = self.table.path_of(n)
        self._detach_from_lower(n)
        n.nlink += 1
        n.ctime_ns = time.time_ns()
        self.table.set_entry(p, new_name, n.ino)
        self._touch_dir(p)
        self.pending.nodes.add(n.ino)
        n.lookups += 1
        if by is not None:
            self.recorder.moved("link", source, join(self.table.path_of(p), new_name), by)
        return n

    def _record(self, op: str, n: Node, by: int | None, *, is_dir: bool = False) -> None:
        if by is not None:
            self.recorder.changed(op, self.table.path_of(n), by, is_dir=is_dir)

    def _record_gone(self, op: str, p: Node, name: bytes, by: int | None, is_dir: bool) -> None:
        if by is not None:
            self.recorder.changed(op, join(self.table.path_of(p), name), by, is_dir=is_dir)

    # ---------------------------------------------------------------- what gitsess adds itself

    def add_dir(self, parent: Node, name: bytes) -> Node:
        """A directory made by gitsess itself (the kernel holds no reference to it)."""
        self.table.make_upper(parent)
        h = self.attrs.getattr(parent)
        return self._new_node(parent, name, stat.S_IFDIR | 0o755, h.uid, h.gid)

    def add_file(self, parent: Node, name: bytes, data: bytes) -> None:
        self.table.make_upper(parent)
        h = self.attrs.getattr(parent)
        n = self._new_node(parent, name, stat.S_IFREG | 0o644, h.uid, h.gid)
        n.data = INLINE
        self.content.write(n, 0, data)

    def hide(self, parent: Node, name: bytes) -> None:
        """A whiteout for `name`, whatever the worktree has there now or later."""
        self.table.make_upper(parent)
        n = self.table.find(parent.ino, name)
        self.table.set_entry(parent, name, 0)
        self._touch_dir(parent)
        if n is not None:
            self.unname(n)

    # ---------------------------------------------------------------- removing names

    def unlink(self, parent: int, name: bytes, *, by: int | None = None) -> None:
        self.lower.check_name(name)
        p = self._writable_dir(parent)
        n = self.table.find(parent, name)
        if n is None:
            raise err(errno.ENOENT)
        if n.is_dir:
            raise err(errno.EISDIR)
        self.before_name_change(p, name)
        self._remove_entry(p, name)
        self._touch_dir(p)
        self.unname(n)
        self._record_gone("unlink", p, name, by, is_dir=False)

    def rmdir(self, parent: int, name: bytes, *, by: int | None = None) -> None:
        self.lower.check_name(name)
        p = self._writable_dir(parent)
        n = self.table.find(parent, name)
        if n is None:
            raise err(errno.ENOENT)
        if not n.is_dir:
            raise err(errno.ENOTDIR)
        if n.sealed:
            raise err(errno.EBUSY)
        if not self._empty(n):
            raise err(errno.ENOTEMPTY)
        self.before_name_change(p, name)
        p.subdirs = None
        self._remove_entry(p, name)
        self._touch_dir(p)
        self.unname(n)
        self._record_gone("rmdir", p, name, by, is_dir=True)

    def _empty(self, n: Node) -> bool:
        """Whether directory `n` holds nothing, not even a hidden path (which is not listed)."""
        if next(self.table.children(n), None) is not None:
            return False
        rel = n.worktree_rel
        return rel is None or not any(h.rpartition(b"/")[0] == rel for h in self.lower.hidden)

    def _remove_entry(self, parent: Node, name: bytes) -> None:
        """Drop a name: a whiteout when the lower layer has it, else nothing at all."""
        self.table.make_upper(parent)
        rel = None if parent.origin is None else join(parent.origin, name)
        if rel is not None and self.lower.stat(rel) is not None:
            self.table.set_entry(parent, name, 0)
        else:
            assert parent.entries is not None
            parent.entries.pop(name, None)
            self.pending.dentries[(parent.ino, name)] = None

    def unname(self, n: Node) -> None:
        """`n` lost a name; it lives on while the kernel or an open file still holds it."""
        if not n.upper:
            # a lower node the session removed: it has no name any more, though still open
            n.nlink = 0
            if n.lower is not None and self.table.lower_index.get(n.lower) == n.ino:
                del self.table.lower_index[n.lower]
            return
        if n.is_dir:
            n.nlink = 0
            for child in [i for i in (n.entries or {}).values() if i]:
                self.unname(self.nodes[child])
            if n.entries:
                n.entries.clear()
            self.pending.emptied.add(n.ino)
        else:
            n.nlink -= 1
        n.ctime_ns = time.time_ns()
        self.pending.nodes.add(n.ino)
        self.table.maybe_drop(n)

    # ---------------------------------------------------------------- renaming

    def rename(
        self,
        old_parent: int,
        old_name: bytes,
        new_parent: int,
        new_name: bytes,
        flags: int,
        uid: int,
        gid: int,
        *,
        by: int | None = None,
    ) -> None:
        """rename(2), or renameat2(2) with `flags`; `uid` and `gid` own a whiteout it leaves."""
        exclusive = RENAME_NOREPLACE | RENAME_WHITEOUT
        if flags & ~(exclusive | RENAME_EXCHANGE) or (
            flags & RENAME_EXCHANGE and flags & exclusive
        ):
            raise err(errno.EINVAL)
        self.lower.check_name(old_name)
        self.lower.check_name(new_name)
        op = self._writable_dir(old_parent)
        np = self._writable_dir(new_parent)
        old = join(self.table.path_of(op), old_name)
        self.before_name_change(op, old_name)
        self.before_name_change(np, new_name)
        src = self.table.find(old_parent, old_name)
        if src is None:
            raise err(errno.ENOENT)
        dst = self.table.find(new_parent, new_name)
        if src.sealed or (dst is not None and dst.sealed):
            raise err(errno.EBUSY)
        if flags & RENAME_NOREPLACE and dst is not None:
            raise err(errno.EEXIST)
        if flags & RENAME_EXCHANGE:
            if dst is None:
                raise err(errno.ENOENT)
            self._exchange(op, old_name, src, np, new_name, dst)
        elif dst is not src:
            self._move(op, old_name, src, np, new_name, dst, flags, uid, gid)
        if by is not None:
            new = join(self.table.path_of(np), new_name)
            self.recorder.moved("rename", old, new, by, is_dir=src.is_dir)

    def _move(
        self,
        op: Node,
        old_name: bytes,
        src: Node,
        np: Node,
        new_name: bytes,
        dst: Node | None,
        flags: int,
        uid: int,
        gid: int,
    ) -> None:
        if dst is not None:
            if src.is_dir and not dst.is_dir:
                raise err(errno.ENOTDIR)
            if dst.is_dir and not src.is_dir:
                raise err(errno.EISDIR)
            if dst.is_dir and not self._empty(dst):
                raise err(errno.ENOTEMPTY)
        self._detach_from_lower(src)
        if src.is_dir or (dst is not None and dst.is_dir):
            op.subdirs = np.subdirs = None
        self._remove_entry(op, old_name)
        if dst is not None:
            self.unname(dst)
        self.table.set_entry(np, new_name, src.ino)
        src.parent, src.name = np.ino, new_name
        src.ctime_ns = time.time_ns()
        self.pending.nodes.add(src.ino)
        if flags & RENAME_WHITEOUT:
            self._new_node(op, old_name, stat.S_IFCHR, uid, gid)
        self._touch_dir(op)
        self._touch_dir(np)
        self.after_rename(np, new_name)

    def _exchange(
        self, op: Node, old_name: bytes, src: Node, np: Node, new_name: bytes, dst: Node
    ) -> None:
        self._detach_from_lower(src)
        self._detach_from_lower(dst)
        if src.is_dir != dst.is_dir:  # a directory changes parents: their counts move
            op.subdirs = np.subdirs = None
        self.table.set_entry(op, old_name, dst.ino)
        self.table.set_entry(np, new_name, src.ino)
        src.parent, src.name, dst.parent, dst.name = np.ino, new_name, op.ino, old_name
        src.ctime_ns = dst.ctime_ns = time.time_ns()
        self.pending.nodes.update((src.ino, dst.ino))
        self._touch_dir(op)
        self._touch_dir(np)

    def _detach_from_lower(self, n: Node) -> None:
        """A file the session renames or links stops following its worktree original."""
        self.table.make_upper(n)
        if stat.S_ISREG(n.mode):
            self.content.ensure_data(n)

    # ---------------------------------------------------------------- entry bookkeeping

    def _touch_dir(self, d: Node) -> None:
        now = time.time_ns()
        d.mtime_ns = d.ctime_ns = now
        self.pending.nodes.add(d.ino)

    def _new_node(self, parent: Node, name: bytes, mode: int, uid: int, gid: int) -> Node:
        now = time.time_ns()
        n = Node(self.table.allocate(), parent.ino, name)
        n.upper = True
        n.mode, n.uid, n.gid = mode, uid, gid
        n.atime_ns = n.mtime_ns = n.ctime_ns = now
        if stat.S_ISDIR(mode):
            n.entries = {}
        self.nodes[n.ino] = n
        self.table.set_entry(parent, name, n.ino)
        self._touch_dir(parent)
        self.pending.nodes.add(n.ino)
        return n

    def _writable_dir(self, parent: int) -> Node:
        self.table.check_writable()
        p = self.table.node(parent)
        if not p.is_dir:
            raise err(errno.ENOTDIR)
        self.table.make_upper(p)
        return p
