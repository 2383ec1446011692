"""The merged view of a session: the lower worktree on disk plus the upper layer in memory.

This is the filesystem's logic without FUSE: every operation takes inode numbers and names and
raises `OSError` with the errno a local filesystem would give (the adapter turns it into a
`FUSEError`; the CLI-side readers never import pyfuse3 and trio). The FUSE adapter (`fs.py`) and
the offline reader (`view.py`) both stand on it.

`Tree` is three classes, each on the one below: `LookupTree` (`tree_lookup.py`: load, commit,
lookup, attributes, listings), `DataTree` (`tree_data.py`: copy-up, file data, metadata,
xattrs), and here the names: entries, create, unlink, rename, link, drop after an apply.

Deleting a lower name writes one whiteout; whiteouts below a directory wait until it has been
quiet for 1 s, so `rm -rf` of a lower tree ends as one whiteout for its top (an `fsync`, a
`sync` request or unmount writes them at once). Renaming a lower directory makes it a merged
directory under the new name, still merging with the old lower path. `renameat2` takes
`RENAME_NOREPLACE`, `RENAME_EXCHANGE` and `RENAME_WHITEOUT` as ext4 does.

Below `.git`: the state dir is a sealed node (never listed, found as an empty directory nobody
can change, and its parent is never empty); a real git's lock file on the git unit is never
shown; the first change to HEAD, the index or the branch ref makes all three the session's own
(`gitunit`); and a real fan-out directory of the object store that the session removes is
replaced by a new one hiding only the names it holds then, so real objects written there later
are still read.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from gitsess.overlay import gitunit
from gitsess.overlay.delta import INLINE
from gitsess.overlay.gitdir import object_store
from gitsess.overlay.index_view import IndexView
from gitsess.overlay.nodes import ROOT_INODE, Node, err, join, stamp
from gitsess.overlay.tree_data import DataTree

# renameat2(2) flags
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4  # leaves an overlay whiteout (a character device 0:0) at the old name


class Tree(DataTree):
    # set while `gitunit` itself changes HEAD, the index or the branch's ref
    git_unit_busy = False
    # What the view shows as `.git/index` while it follows the real one (set by the daemon)
    index_view: IndexView | None = None

    # ---------------------------------------------------------------- entry bookkeeping

    def resolve(self, path: bytes) -> Node | None:
        """The node at a view path ("" is the root), or None."""
        node = self.node(ROOT_INODE)
        for part in path.split(b"/") if path else []:
            if not node.is_dir:
                return None
            try:
                found = self.find(node.ino, part)
            except OSError:
                return None
            if found is None:
                return None
            node = found
        return node

    def written_since(self, expect: dict[bytes, tuple[int, int, int] | None]) -> set[bytes]:
        """Paths the session holds whose (mode, size, mtime) is not what `expect` says (None:
        absent): written to since an apply read them, so they must stay. Their parent
        directories too: dropping one drops what is below it."""
        moved = set()
        for path, want in expect.items():
            parent_path, _, name = path.rpartition(b"/")
            parent = self.resolve(parent_path)
            if parent is None or parent.entries is None or name not in parent.entries:
                continue
            ino = parent.entries[name]
            n = self.nodes.get(ino) if ino else None
            if n is not None and not n.upper:
                continue
            now = None
            if n is not None:
                a = self.getattr(n)
                now = (a.mode, a.size, a.mtime_ns)
            if now != want:
                moved.add(path)
        for path in list(moved):
            while path:
                path = path.rpartition(b"/")[0]
                moved.add(path)
        return moved

    def drop(self, paths: list[bytes]) -> list[tuple[int, bytes]]:
        """Forget the session's changes at these paths, now that the worktree has them.

        Shallowest first: dropping a directory drops everything under it. A path whose parent
        directory is not merged in place (created, or renamed) stays: the worktree has no
        directory there to fall through to, and its content is already what the worktree has.
        Returns the (directory, name) pairs whose kernel entries are now stale.
        """
        dropped: list[tuple[int, bytes]] = []
        for path in sorted(set(paths), key=lambda p: (p.count(b"/"), p)):
            parent_path, _, name = path.rpartition(b"/")
            parent = self.resolve(parent_path)
            if (
                parent is None
                or not parent.upper
                or parent.origin != parent_path
                or parent.entries is None
                or name not in parent.entries
            ):
                continue
            ino = parent.entries[name]
            del parent.entries[name]
            parent.subdirs = None
            self._pending.dentries[(parent.ino, name)] = None
            if ino:
                self._unname(self.nodes[ino])
            dropped.append((parent.ino, name))
            self.journal.note(path, is_dir=True)
            self._pending.undrift.add(os.fsdecode(path))
            self._prune(parent, parent_path)
        return dropped

    def restamp(self, paths: list[bytes]) -> None:
        """Record the worktree's current state as what these paths were copied from (apply
        itself changed them, so the old record would read as an edit made outside)."""
        for path in paths:
            n = self.resolve(path)
            if n is None or not n.upper or n.origin is None:
                continue
            st = self._lower_stat(n.origin)
            if st is not None:
                n.origin_stamp = stamp(st)
                self._pending.nodes.add(n.ino)

    def _prune(self, d: Node, path: bytes) -> None:
        """Turn directories that hold no change any more back into plain lower directories."""
        while d.ino != ROOT_INODE and d.upper and d.origin == path and not d.entries:
            if d.xattrs:
                return
            parent = self.node(d.parent)
            assert parent.entries is not None
            parent.entries.pop(d.name, None)
            self._pending.dentries[(parent.ino, d.name)] = None
            self._pending.deleted.add(d.ino)
            self._pending.nodes.discard(d.ino)
            d.upper, d.lower, d.origin, d.entries, d.origin_stamp = False, path, None, None, None
            d.nlink = 1
            self.lower_index[path] = d.ino
            d, path = parent, path.rpartition(b"/")[0]

    def _remove_entry(self, parent: Node, name: bytes) -> None:
        """Drop a name: a whiteout when the lower layer has it, else nothing at all."""
        self.make_upper(parent)
        rel = None if parent.origin is None else join(parent.origin, name)
        if rel is not None and self._lower_stat(rel) is not None:
            self._set_entry(parent, name, 0)
        else:
            assert parent.entries is not None
            parent.entries.pop(name, None)
            self._pending.dentries[(parent.ino, name)] = None

    def _touch_dir(self, d: Node) -> None:
        now = time.time_ns()
        d.mtime_ns = d.ctime_ns = now
        self._pending.nodes.add(d.ino)

    def _new_node(self, parent: Node, name: bytes, mode: int, uid: int, gid: int) -> Node:
        now = time.time_ns()
        n = Node(self._allocate(), parent.ino, name)
        n.upper = True
        n.mode, n.uid, n.gid = mode, uid, gid
        n.atime_ns = n.mtime_ns = n.ctime_ns = now
        if stat.S_ISDIR(mode):
            n.entries = {}
            # A fan-out dir git makes in the object store (`objects/9c`) also shows the real
            # one: objects the real repository writes there later must stay readable, as
            # the session's HEAD may follow them (the one git state, `gitunit.py`).
            below = self._child_lower_rel(parent, name)
            if below is not None and object_store(below) is not None:
                n.origin = below
        self.nodes[n.ino] = n
        self._set_entry(parent, name, n.ino)
        self._touch_dir(parent)
        self._pending.nodes.add(n.ino)
        return n

    def _writable_dir(self, parent: int) -> Node:
        self._check_writable()
        p = self.node(parent)
        if not p.is_dir:
            raise err(errno.ENOTDIR)
        self.make_upper(p)
        return p

    # ---------------------------------------------------------------- the git unit (gitunit.py)

    def make_upper(self, n: Node) -> None:
        gitunit.before_node_change(self, n)
        super().make_upper(n)

    def find(self, parent: int, name: bytes) -> Node | None:
        n = super().find(parent, name)
        if n is not None and name.endswith(b".lock") and gitunit.hides_real_lock(self, n):
            return None
        return n

    def add_dir(self, parent: Node, name: bytes) -> Node:
        """A directory made by gitsess itself (the kernel holds no reference to it)."""
        self.make_upper(parent)
        h = self.getattr(parent)
        return self._new_node(parent, name, stat.S_IFDIR | 0o755, h.uid, h.gid)

    def add_file(self, parent: Node, name: bytes, data: bytes) -> None:
        self.make_upper(parent)
        h = self.getattr(parent)
        n = self._new_node(parent, name, stat.S_IFREG | 0o644, h.uid, h.gid)
        n.data = INLINE
        self.write(n, 0, data)

    def hide(self, parent: Node, name: bytes) -> None:
        """A whiteout for `name`, whatever the worktree has there now or later."""
        self.make_upper(parent)
        n = self.find(parent.ino, name)
        self._set_entry(parent, name, 0)
        self._touch_dir(parent)
        if n is not None:
            self._unname(n)

    # ---------------------------------------------------------------- namespace operations

    def create(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int = 0
    ) -> Node:
        self._check_name(name)
        p = self._writable_dir(parent)
        gitunit.before_name_change(self, p, name)
        if self.find(parent, name) is not None:
            raise err(errno.EEXIST)
        n = self._new_node(p, name, mode, uid, gid)
        n.rdev = rdev
        if stat.S_ISREG(mode):
            n.data = INLINE
        n.lookups += 1
        return n

    def symlink(self, parent: int, name: bytes, target: bytes, uid: int, gid: int) -> Node:
        self._check_name(name)
        p = self._writable_dir(parent)
        gitunit.before_name_change(self, p, name)
        if self.find(parent, name) is not None:
            raise err(errno.EEXIST)
        n = self._new_node(p, name, stat.S_IFLNK | 0o777, uid, gid)
        n.target = target
        n.size = len(target)
        n.lookups += 1
        return n

    def unlink(self, parent: int, name: bytes) -> None:
        self._check_name(name)
        p = self._writable_dir(parent)
        n = self.find(parent, name)
        if n is None:
            raise err(errno.ENOENT)
        if n.is_dir:
            raise err(errno.EISDIR)
        gitunit.before_name_change(self, p, name)
        self._unlink_node(p, name, n)

    def _unlink_node(self, p: Node, name: bytes, n: Node) -> None:
        self._remove_entry(p, name)
        self._touch_dir(p)
        self._unname(n)

    def _unname(self, n: Node) -> None:
        """`n` lost a name; it lives on while the kernel or an open file still holds it."""
        if not n.upper:
            self._detach_lower(n)
            return
        if n.is_dir:
            n.nlink = 0
            for child in [i for i in (n.entries or {}).values() if i]:
                self._unname(self.nodes[child])
            if n.entries:
                n.entries.clear()
            self._pending.emptied.add(n.ino)
        else:
            n.nlink -= 1
        n.ctime_ns = time.time_ns()
        self._pending.nodes.add(n.ino)
        self._maybe_drop(n)

    def rmdir(self, parent: int, name: bytes) -> None:
        self._check_name(name)
        p = self._writable_dir(parent)
        n = self.find(parent, name)
        if n is None:
            raise err(errno.ENOENT)
        if not n.is_dir:
            raise err(errno.ENOTDIR)
        if n.sealed:
            raise err(errno.EBUSY)
        if not self._empty(n):
            raise err(errno.ENOTEMPTY)
        gitunit.before_name_change(self, p, name)
        self._rmdir_node(p, name, n)

    def _empty(self, n: Node) -> bool:
        """Whether directory `n` holds nothing, not even a hidden path (which is not listed)."""
        if next(self.children(n), None) is not None:
            return False
        rel = n.worktree_rel
        return rel is None or not any(h.rpartition(b"/")[0] == rel for h in self.hidden)

    def _rmdir_node(self, p: Node, name: bytes, n: Node) -> None:
        p.subdirs = None
        below = self._child_lower_rel(p, name)
        if below is not None and object_store(below) is not None and self._lower_stat(below):
            self._rmdir_in_object_store(p, name, n, below)
            return
        self._remove_entry(p, name)
        self._touch_dir(p)
        self._unname(n)

    def _rmdir_in_object_store(self, p: Node, name: bytes, n: Node, below: bytes) -> None:
        """A real directory of the object store (`objects/9c`, emptied by a `git prune` or
        `repack -d` inside) is not hidden whole: that would hide the objects the real
        repository writes there later, which the session's HEAD, following the real branch,
        may need. A new directory takes the name instead (the kernel marks the removed one
        dead: nothing can be made in it), hiding only what the real one holds now; an empty
        one is not listed (`LookupTree.children`), so the removal shows as one."""
        a = self.getattr(n)
        self._unname(n)
        shell = self._new_node(p, name, a.mode, a.uid, a.gid)
        for real, _ in self._lower_listing(below):
            self._set_entry(shell, real, 0)

    def _detach_lower(self, n: Node) -> None:
        """A lower node the session removed: it has no name any more, though still open."""
        n.nlink = 0
        if n.lower is not None and self.lower_index.get(n.lower) == n.ino:
            del self.lower_index[n.lower]

    def mkdir(self, parent: int, name: bytes, mode: int, uid: int, gid: int) -> Node:
        return self.create(parent, name, stat.S_IFDIR | (mode & 0o7777), uid, gid)

    def link(self, ino: int, new_parent: int, new_name: bytes) -> Node:
        self._check_name(new_name)
        p = self._writable_dir(new_parent)
        n = self.node(ino)
        if n.is_dir:
            raise err(errno.EPERM)
        gitunit.before_name_change(self, p, new_name)
        if self.find(new_parent, new_name) is not None:
            raise err(errno.EEXIST)
        self._detach_from_lower(n)
        n.nlink += 1
        n.ctime_ns = time.time_ns()
        self._set_entry(p, new_name, n.ino)
        self._touch_dir(p)
        self._pending.nodes.add(n.ino)
        n.lookups += 1
        return n

    def _detach_from_lower(self, n: Node) -> None:
        """A file the session renames or links stops following its worktree original."""
        self.make_upper(n)
        if stat.S_ISREG(n.mode):
            self.ensure_data(n)

    def rename(
        self,
        old_parent: int,
        old_name: bytes,
        new_parent: int,
        new_name: bytes,
        flags: int,
        uid: int,
        gid: int,
    ) -> None:
        """rename(2), or renameat2(2) with `flags`; `uid` and `gid` own a whiteout it leaves."""
        exclusive = RENAME_NOREPLACE | RENAME_WHITEOUT
        if flags & ~(exclusive | RENAME_EXCHANGE) or (
            flags & RENAME_EXCHANGE and flags & exclusive
        ):
            raise err(errno.EINVAL)
        self._check_name(old_name)
        self._check_name(new_name)
        op = self._writable_dir(old_parent)
        np = self._writable_dir(new_parent)
        gitunit.before_name_change(self, op, old_name)
        gitunit.before_name_change(self, np, new_name)
        src = self.find(old_parent, old_name)
        if src is None:
            raise err(errno.ENOENT)
        dst = self.find(new_parent, new_name)
        if src.sealed or (dst is not None and dst.sealed):
            raise err(errno.EBUSY)
        if flags & RENAME_NOREPLACE and dst is not None:
            raise err(errno.EEXIST)
        if flags & RENAME_EXCHANGE:
            if dst is None:
                raise err(errno.ENOENT)
            self._exchange(op, old_name, src, np, new_name, dst)
            return
        if dst is src:
            return
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
            self._unname(dst)
        self._set_entry(np, new_name, src.ino)
        src.parent, src.name = np.ino, new_name
        src.ctime_ns = time.time_ns()
        self._pending.nodes.add(src.ino)
        if flags & RENAME_WHITEOUT:
            self._new_node(op, old_name, stat.S_IFCHR, uid, gid)
        self._touch_dir(op)
        self._touch_dir(np)
        gitunit.after_rename(self, np, new_name)

    def _exchange(
        self, op: Node, old_name: bytes, src: Node, np: Node, new_name: bytes, dst: Node
    ) -> None:
        self._detach_from_lower(src)
        self._detach_from_lower(dst)
        if src.is_dir != dst.is_dir:  # a directory changes parents: their counts move
            op.subdirs = np.subdirs = None
        self._set_entry(op, old_name, dst.ino)
        self._set_entry(np, new_name, src.ino)
        src.parent, src.name, dst.parent, dst.name = np.ino, new_name, op.ino, old_name
        src.ctime_ns = dst.ctime_ns = time.time_ns()
        self._pending.nodes.update((src.ino, dst.ino))
        self._touch_dir(op)
        self._touch_dir(np)
