"""The merged view of a session: the lower worktree on disk plus the upper layer in memory.

This is the filesystem's logic without FUSE: every operation takes inode numbers and names and
raises `OSError` with the errno a local filesystem would give (the adapter turns it into a
`FUSEError`; the CLI-side readers never import pyfuse3 and trio). The FUSE adapter (`fs.py`),
the offline reader (`view.py`) and the offline writer (`services/viewwrite.py`) all stand on it.

`Tree` is a facade over its parts, each with one job, from the bottom up:
- `LowerLayer` (`lower_layer.py`): the worktree as read: paths, lstat, listings, descriptors;
- `DataFiles` (`data_files.py`): the session's data files: open, synced, kept, stray;
- `NodeTable` (`node_table.py`): the nodes in memory: load, commit, find, forget, copy-up,
  listings;
- `ContentStore` (`content_store.py`): file bytes: copy-up of data, read, write, truncate;
- `Attributes` (`attributes.py`): getattr, setattr, extended attributes;
- `Namespace` (`namespace.py`): create, link, unlink, rename, mkdir, rmdir;
- `AppliedPaths` (`applied.py`): applied paths dropped from the delta;
- `LowerChanges` (`lower_changes.py`): drift and stale kernel caches when the worktree changes.
The parts that change the view record the change (`ChangeRecorder`: audit log, fsmonitor
journal) when the caller names the process that asked (`by`). The git unit (`gitunit.py`) is
wired in here, through hooks of the node table and the namespace, as it works on the whole
tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping

from gitsess.git.view import Stamp
from gitsess.overlay import gitunit, objectdir
from gitsess.overlay.applied import AppliedPaths, DropResult
from gitsess.overlay.attributes import Attributes
from gitsess.overlay.audit import Audit
from gitsess.overlay.content_store import ContentStore
from gitsess.overlay.data_files import DataFiles
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.fsmonitor import FsmonitorJournal
from gitsess.overlay.index_view import IndexView
from gitsess.overlay.lower_changes import LowerChanges, Stale
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.namespace import Namespace
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import Attr, Node
from gitsess.overlay.recorder import ChangeRecorder


class Tree:
    # set while `gitunit` itself changes HEAD, the index or the branch's ref
    git_unit_busy = False
    # What the view shows as `.git/index` while it follows the real one (set by the daemon)
    index_view: IndexView | None = None

    def __init__(
        self, store: DeltaStore, lower_root: str, hidden: set[bytes], *, writer: bool = True
    ) -> None:
        """`writer` is False for readers beside a live daemon: they never change delta.db."""
        self.store = store
        self.lower = LowerLayer(lower_root, os.path.dirname(store.data_dir), hidden, writer=writer)
        self.data = DataFiles(store, writer=writer)
        self.audit = Audit(next_process_id=store.next_process_id())
        self.journal = FsmonitorJournal()
        self.table = NodeTable(store, self.lower, self.data, self.audit, writer=writer)
        self.nodes = self.table.nodes
        recorder = ChangeRecorder(self.audit, self.journal, self.table.path_of)
        self.content = ContentStore(self.table, self.data, self.lower, recorder)
        self.replaced = self.content.replaced
        self.attrs = Attributes(self.table, self.content, self.data, self.lower, recorder)
        self.names = Namespace(self.table, self.content, self.attrs, self.lower, recorder)
        self.applied = AppliedPaths(self.table, self.names, self.attrs, self.lower, recorder)
        self.lower_changes = LowerChanges(self.table, self.lower, self.journal)
        self.table.before_copy_up = lambda n: gitunit.before_node_change(self, n)
        self.table.hides_lock = lambda n: gitunit.hides_real_lock(self, n)
        self.names.before_name_change = lambda p, name: gitunit.before_name_change(self, p, name)
        self.names.after_rename = lambda p, name: gitunit.after_rename(self, p, name)
        if writer:
            objectdir.move_rows_out(self)

    # ---------------------------------------------------------------- what the parts share

    @property
    def root(self) -> bytes:
        return self.lower.root

    @property
    def redirects(self) -> dict[bytes, bytes]:
        return self.lower.redirects

    @property
    def name_max(self) -> int:
        return self.lower.name_max

    @property
    def watched(self) -> bool:
        """Whether the lower watch is in place (see `LowerChanges.catch_up`)."""
        return self.lower.watched

    @property
    def readonly(self) -> bool:
        return self.table.readonly

    @readonly.setter
    def readonly(self, value: bool) -> None:
        self.table.readonly = value

    def lower_path(self, rel: bytes) -> bytes:
        return self.lower.path(rel)

    # ---------------------------------------------------------------- persistence

    def commit(self, *, durable: bool = False, hold_whiteouts: bool = True) -> None:
        self.table.commit(durable=durable, hold_whiteouts=hold_whiteouts)

    def save(self) -> None:
        """Persist everything pending now, durably, the whiteouts of directories still being
        emptied included: what a reader of delta.db that comes next (a sync, a checkpoint, a
        rewind, a stop) must find there."""
        self.table.commit(durable=True, hold_whiteouts=False)

    @property
    def has_pending(self) -> bool:
        return self.table.has_pending

    def reload(self, inodes: Iterable[int]) -> list[int]:
        return self.table.reload(inodes)

    def remove_stray_data(self) -> None:
        self.data.remove_stray()

    def let_go(self, *inodes: int) -> None:
        self.data.let_go(*inodes)

    def close(self) -> None:
        self.data.close()
        self.replaced.release_all()
        self.lower.close_all()

    # ---------------------------------------------------------------- nodes (NodeTable)

    def node(self, ino: int) -> Node:
        return self.table.node(ino)

    def path_of(self, n: Node) -> bytes:
        return self.table.path_of(n)

    def resolve(self, path: bytes) -> Node | None:
        return self.table.resolve(path)

    def find(self, parent: int, name: bytes) -> Node | None:
        return self.table.find(parent, name)

    def lookup(self, parent: int, name: bytes) -> Node | None:
        return self.table.lookup(parent, name)

    @staticmethod
    def count_lookup(n: Node) -> None:
        NodeTable.count_lookup(n)

    def forget(self, ino: int, count: int) -> None:
        self.table.forget(ino, count)

    def listing(self, n: Node) -> list[bytes]:
        return self.table.listing(n)

    def children(self, n: Node) -> Iterator[tuple[bytes, bool]]:
        return self.table.children(n)

    # ---------------------------------------------------------------- attributes (Attributes)

    def getattr(self, n: Node) -> Attr:
        return self.attrs.getattr(n)

    def lower_size(self, n: Node) -> int | None:
        return self.attrs.lower_size(n)

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
        self.attrs.setattr(
            n, mode=mode, uid=uid, gid=gid, size=size, atime_ns=atime_ns, mtime_ns=mtime_ns, by=by
        )

    def getxattr(self, n: Node, name: bytes) -> bytes:
        return self.attrs.getxattr(n, name)

    def listxattr(self, n: Node) -> list[bytes]:
        return self.attrs.listxattr(n)

    def setxattr(self, n: Node, name: bytes, value: bytes, *, by: int | None = None) -> None:
        self.attrs.setxattr(n, name, value, by=by)

    def removexattr(self, n: Node, name: bytes, *, by: int | None = None) -> None:
        self.attrs.removexattr(n, name, by=by)

    # ---------------------------------------------------------------- content (ContentStore)

    def ensure_data(self, n: Node, *, keep: int | None = None) -> None:
        self.content.ensure_data(n, keep=keep)

    def worktree_fd(self, n: Node) -> int | None:
        return self.content.worktree_fd(n)

    def read(self, n: Node, off: int, size: int) -> bytes:
        return self.content.read(n, off, size)

    def write(self, n: Node, off: int, buf: bytes, *, by: int | None = None) -> int:
        return self.content.write(n, off, buf, by=by)

    def truncate(self, n: Node, size: int, *, by: int | None = None) -> None:
        self.content.truncate(n, size, by=by)

    def fallocate(
        self, n: Node, mode: int, offset: int, length: int, *, by: int | None = None
    ) -> None:
        self.content.fallocate(n, mode, offset, length, by=by)

    def readlink(self, n: Node) -> bytes:
        return self.content.readlink(n)

    def opened(self, n: Node) -> None:
        self.content.opened(n)

    def read_whole(self, n: Node) -> bytes:
        """All of file `n`'s bytes, as one reader holding it open."""
        size = self.getattr(n).size
        self.opened(n)
        try:
            return self.read(n, 0, size) if size else b""
        finally:
            self.released(n)

    def released(self, n: Node) -> None:
        self.content.released(n)

    def keep_content(self, inodes: Iterable[int]) -> list[int]:
        return self.content.keep_content(inodes)

    def hold_replaced(self, inodes: Iterable[int]) -> list[int]:
        return self.content.hold_replaced(inodes)

    # ---------------------------------------------------------------- names (Namespace)

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
        return self.names.create(parent, name, mode, uid, gid, rdev, by=by)

    def mknod(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int, *, by: int
    ) -> Node:
        return self.names.mknod(parent, name, mode, uid, gid, rdev, by=by)

    def mkdir(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, *, by: int | None = None
    ) -> Node:
        return self.names.mkdir(parent, name, mode, uid, gid, by=by)

    def symlink(
        self, parent: int, name: bytes, target: bytes, uid: int, gid: int, *, by: int | None = None
    ) -> Node:
        return self.names.symlink(parent, name, target, uid, gid, by=by)

    def link(self, ino: int, new_parent: int, new_name: bytes, *, by: int | None = None) -> Node:
        return self.names.link(ino, new_parent, new_name, by=by)

    def unlink(self, parent: int, name: bytes, *, by: int | None = None) -> None:
        self.names.unlink(parent, name, by=by)

    def rmdir(self, parent: int, name: bytes, *, by: int | None = None) -> None:
        self.names.rmdir(parent, name, by=by)

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
        self.names.rename(old_parent, old_name, new_parent, new_name, flags, uid, gid, by=by)

    def add_dir(self, parent: Node, name: bytes) -> Node:
        return self.names.add_dir(parent, name)

    def add_file(self, parent: Node, name: bytes, data: bytes) -> None:
        self.names.add_file(parent, name, data)

    def hide(self, parent: Node, name: bytes) -> None:
        self.names.hide(parent, name)

    def drop_applied(
        self,
        paths: Iterable[bytes],
        restamp: Iterable[bytes] = (),
        expect: Mapping[bytes, Stamp | None] | None = None,
    ) -> DropResult:
        """`AppliedPaths.drop`, saved: what the daemon's drop op and an offline drop
        (`services/live.py`) both do."""
        dropped = self.applied.drop(paths, restamp, expect)
        self.save()
        return dropped

    # ---------------------------------------------------------------- the worktree changed

    def stale_caches(self, rels: set[bytes]) -> Stale:
        return self.lower_changes.stale_caches(rels)

    def catch_up(self) -> Stale:
        return self.lower_changes.catch_up()

    def lose_watch(self) -> Stale:
        return self.lower_changes.lose_watch()
