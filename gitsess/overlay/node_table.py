"""The inode table of the merged view: every node held in memory, loaded from and committed to
delta.db, found by name, copied up, forgotten, and listed. A part of `Tree` (`tree.py`).

The upper layer is inode based. `nodes` holds every object the session created or changed,
`dentries` the names in directories it touched (`ino = 0` is a whiteout). A directory node with
an `origin` merges with that lower directory; `origin IS NULL` is opaque (made by the session).
Objects the session never touched have no row: they are lower nodes, kept in memory only while
the kernel knows them, their attributes read with `lstat` on demand.

Inode numbers: a lower object shows the worktree's own `st_ino` and keeps it when copied up;
objects the session creates get numbers from a persisted counter starting at 2^44, which only
grows. A worktree that reuses a number the session holds gives its object a fresh number.

All upper metadata is held in memory; what changed is committed every 100 ms (and on `fsync`,
a `sync` request, unmount) in one `BEGIN IMMEDIATE` transaction with the audit events of the
period. A commit that fails (a full disk) writes nothing, keeps everything pending and answers
`ENOSPC`. On load, nodes not reachable from the root are deleted and data files are tidied
(`DataFiles.tidy`). Deleting a lower name writes one whiteout; whiteouts below a directory wait
until it has been quiet for 1 s, so `rm -rf` of a lower tree ends as one whiteout for its top
(`save` writes them at once).

Copy-up (`make_upper`) gives a lower node a row (and its parents, as merged directories); its
data stays in the worktree file until `ContentStore.ensure_data`. The git unit's hooks
(`before_copy_up`, `hides_lock`) are set by `Tree`.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator

import apsw

from gitsess.durable import nearly_full
from gitsess.overlay.audit import Audit
from gitsess.overlay.data_files import DataFiles
from gitsess.overlay.delta import FIRST_ALLOCATED_INO, Batch, DeltaStore
from gitsess.overlay.gitdir import GIT_COMMON, in_git
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.nodes import ROOT_INODE, Node, Pending, err, identity, stamp
from gitsess.overlay.relayout import relayout

# A whiteout for a lower name is written only once its directory has been quiet this long, so
# `rm -rf` of a lower tree ends as one whiteout for the top directory, not one row per file.
WHITEOUT_SETTLE_NS = 1_000_000_000


def _no_space(e: apsw.Error, path: str) -> bool:
    return isinstance(e, apsw.FullError) or nearly_full(os.path.dirname(path) or ".")


def _never(n: Node) -> bool:
    return False


def _nothing(n: Node) -> None:
    return None


class NodeTable:
    def __init__(
        self,
        store: DeltaStore,
        lower: LowerLayer,
        data: DataFiles,
        audit: Audit,
        *,
        writer: bool,
    ) -> None:
        """`writer` is False for readers beside a live daemon: they never change delta.db."""
        self.store = store
        self.lower = lower
        self.data = data
        self.audit = audit
        self.writer = writer
        self.readonly = not writer
        self.nodes: dict[int, Node] = {}
        self.lower_index: dict[bytes, int] = {}  # lower path -> ino of its lower node
        self.next_ino = int(store.meta("next_ino", 0))
        self.pending = Pending()
        # Called before a lower node gets a row, and asked whether a lower `*.lock` is hidden.
        self.before_copy_up: Callable[[Node], None] = _nothing
        self.hides_lock: Callable[[Node], bool] = _never
        self.load()

    # ---------------------------------------------------------------- loading and persistence

    def load(self) -> None:
        if self.writer and self.store.history is not None:
            self.store.history.clear_unfinished()
        for r in self.store.nodes():
            n = Node(r.ino, 0, b"")
            n.upper = True
            n.mode, n.uid, n.gid, n.rdev, n.size = r.mode, r.uid, r.gid, r.rdev, r.size
            n.atime_ns, n.mtime_ns, n.ctime_ns, n.nlink = (
                r.atime_ns,
                r.mtime_ns,
                r.ctime_ns,
                r.nlink,
            )
            n.origin, n.data, n.target = r.origin, r.data, r.target
            if r.origin_mode is not None:
                n.origin_stamp = (r.origin_mode, r.origin_size or 0, r.origin_mtime_ns or 0)
            if n.is_dir:
                n.entries = {}
            self.nodes[n.ino] = n
        for parent, name, ino in self.store.dentries():
            p = self.nodes.get(parent)
            if p is not None and p.entries is not None:
                p.entries[name] = ino
                child = self.nodes.get(ino)
                if child is not None:
                    child.parent, child.name = parent, name
        for ino in self.store.all_xattr_inos():
            if ino in self.nodes:
                self.nodes[ino].xattrs = self.store.xattrs(ino)
        if ROOT_INODE not in self.nodes:
            self._create_root()
        reachable = {ROOT_INODE}
        todo = [ROOT_INODE]
        while todo:
            d = self.nodes.get(todo.pop())
            for ino in (d.entries or {}).values() if d else ():
                if ino and ino not in reachable:
                    reachable.add(ino)
                    todo.append(ino)
        orphans = [i for i in self.nodes if i not in reachable]
        if orphans and self.writer:
            self.store.delete_nodes(orphans)
        for ino in orphans:
            del self.nodes[ino]
        if self.writer:
            self.data.tidy(self.nodes)
        relayout(self)

    def reload(self, inodes: Iterable[int]) -> list[int]:
        """After delta.db changed under this tree (a rewind): take the upper layer from it
        anew. Nodes the kernel holds keep their lookups; one the session no longer has turns
        back into the worktree's object it was copied from, or, made by the session, lives on
        without a name until the kernel forgets it, with the content `keep_content` kept of it
        (else none). Returns the inodes whose caches are stale:
        `inodes`, and every node that changed layer."""
        old = dict(self.nodes)
        self.nodes.clear()
        self.lower.forget_listing()
        self.data.close_all()
        self.lower.close_all()
        self.load()
        stale = set(inodes)
        for ino, n in old.items():
            new = self.nodes.get(ino)
            if new is not None:
                self.data.let_go(ino)
                new.lookups, new.opens = n.lookups, n.opens
                if not n.upper:
                    stale.add(ino)
                    if n.lower is not None and self.lower_index.get(n.lower) == ino:
                        del self.lower_index[n.lower]
                continue
            if not (n.lookups or n.opens) or ino == ROOT_INODE:
                self.data.let_go(ino)
                continue
            if not n.upper:
                self.nodes[ino] = n
                continue
            stale.add(ino)
            if n.origin is not None:
                lower = Node(ino, n.parent, n.name)
                lower.lower, lower.mode = n.origin, n.mode
                lower.lookups, lower.opens = n.lookups, n.opens
                self.nodes[ino] = lower
                self.lower_index.setdefault(n.origin, ino)
                self.data.let_go(ino)
            else:
                if ino not in self.data.kept:
                    n.data = 0
                n.nlink, n.entries = 0, ({} if n.is_dir else None)
                self.nodes[ino] = n
        return sorted(stale)

    def _create_root(self) -> None:
        st = os.lstat(self.lower.root)
        root = Node(ROOT_INODE, ROOT_INODE, b"")
        fill_from_stat(root, st)
        root.upper = True
        root.origin = b""
        root.entries = {}
        self.nodes[ROOT_INODE] = root
        self.pending.nodes.add(ROOT_INODE)

    def commit(self, *, durable: bool = False, hold_whiteouts: bool = True) -> None:
        """Persist everything changed since the last commit in one transaction.

        With `hold_whiteouts`, whiteouts of directories still being emptied wait for a later
        commit (an `rm -rf` in progress is written once, as the directory's whiteout).
        """
        p = self.pending
        now = time.monotonic_ns()
        dentries: dict[tuple[int, bytes], int | None] = {}
        held: dict[tuple[int, bytes], int | None] = {}
        # Names in directories that went, or were emptied by their removal, go with them: one
        # pass here instead of a scan of everything pending per removed directory.
        gone = p.deleted | p.emptied
        for key, ino in p.dentries.items():
            if key[0] in gone:
                continue
            parent = self.nodes.get(key[0])
            if (
                hold_whiteouts
                and ino == 0
                and parent is not None
                and now - parent.quiet_since < WHITEOUT_SETTLE_NS
            ):
                held[key] = ino
            else:
                dentries[key] = ino
        processes, events = self.audit.drain()
        if durable:
            self.data.sync(self.nodes)
        if not (
            p.deleted
            or p.nodes
            or dentries
            or p.xattrs
            or p.meta
            or p.drift
            or p.undrift
            or p.inline
            or events
        ):
            return
        batch = Batch(
            deleted_nodes=set(p.deleted),
            nodes=[self.nodes[i].row() for i in p.nodes if i in self.nodes],
            dentries=dentries,
            xattrs={k: v for k, v in p.xattrs.items() if k[0] not in p.deleted},
            meta=dict(p.meta),
            processes=processes,
            events=events,
            drift=dict(p.drift),
            undrift=set(p.undrift),
            inline={k: v for k, v in p.inline.items() if k not in p.deleted},
        )
        try:
            self.store.commit(batch, durable=durable)
        except (apsw.FullError, apsw.IOError) as e:
            # Nothing was written; everything stays pending and the writer hears ENOSPC (or
            # EIO). A full disk shows as either: SQLite says "disk I/O error" when its WAL
            # index cannot grow.
            self.audit.events[:0] = events
            self.audit.new_processes[:0] = processes
            raise err(errno.ENOSPC if _no_space(e, self.store.path) else errno.EIO) from None
        self.store.remove_data(p.data_files)
        p.reset(held)

    @property
    def has_pending(self) -> bool:
        return self.pending.any() or bool(self.audit.events)

    # ---------------------------------------------------------------- finding nodes

    def node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise err(errno.ESTALE) from None

    def path_of(self, n: Node) -> bytes:
        """The node's path in the view (the last name it was seen under)."""
        parts: list[bytes] = []
        hops = 0
        while n.ino != ROOT_INODE and hops < 4096:
            parts.append(n.name)
            parent = self.nodes.get(n.parent)
            if parent is None:
                break
            n = parent
            hops += 1
        return b"/".join(reversed(parts))

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

    def child_lower_rel(self, p: Node, name: bytes) -> bytes | None:
        """The lower path a name in `p` falls through to, or None when `p` hides the lower."""
        base = p.origin if p.upper else p.lower
        if base is None:
            return None if p.upper else name
        return base + b"/" + name if base else name  # (`join`, inline: once per name listed)

    def find(self, parent: int, name: bytes) -> Node | None:
        """The node `name` in directory `parent` names, without counting a lookup (a real
        git's lock file on the git unit is never found: `gitunit.hides_real_lock`)."""
        self.lower.check_name(name)
        p = self.nodes.get(parent)  # (`node` and `is_dir` inline: once per LOOKUP)
        if p is None:
            raise err(errno.ESTALE)
        if not stat.S_ISDIR(p.mode):
            raise err(errno.ENOTDIR)
        return self.find_in(p, name)

    def find_in(self, p: Node, name: bytes) -> Node | None:
        """`find` in directory `p`, `name` checked already (a listing's, whose names were)."""
        entries = p.entries
        if entries is not None and name in entries:
            ino = entries[name]
            return self.nodes[ino] if ino else None
        rel = self.child_lower_rel(p, name)
        if rel is None or p.sealed:
            return None
        st = self.lower.stat(rel)
        if st is None:
            return None
        n = self._lower_node(rel, st, p, name)
        if name.endswith(b".lock") and self.hides_lock(n):
            return None
        return n

    def known(self, p: Node, name: bytes) -> Node | None:
        """The node held for `name` in directory `p`, found without touching the disk; None
        when none is held (then `find` asks the worktree)."""
        entries = p.entries
        if entries is not None and name in entries:
            ino = entries[name]
            return self.nodes[ino] if ino else None
        rel = self.child_lower_rel(p, name)
        if rel is None:
            return None
        n = self.nodes.get(self.lower_index.get(rel, 0))
        if n is None or n.upper or n.lower != rel or n.parent != p.ino or n.name != name:
            return None
        return n

    def _lower_node(self, rel: bytes, st: os.stat_result, p: Node, name: bytes) -> Node:
        ino = self.lower_index.get(rel)
        if ino is not None:
            n = self.nodes.get(ino)
            same_type = n is not None and stat.S_IFMT(n.mode) == stat.S_IFMT(st.st_mode)
            if (
                n is not None
                and not n.upper
                and n.lower == rel
                and same_type
                and (n.target is None or not self._retargeted(n, rel))
                and (n.version is None or n.version == identity(st))
            ):
                n.parent, n.name = p.ino, name
                n.st = st
                return n
        ino = st.st_ino
        taken = ino in self.nodes or ino in self.pending.deleted or ino in self.data.stray
        if ino == ROOT_INODE or taken or ino >= FIRST_ALLOCATED_INO:
            # The worktree's number is taken (by an object the session moved or created, by a
            # lower object replaced outside the session, or by one whose deletion the next
            # commit writes, or a stray data file not yet removed, with its data): give this
            # one a fresh number.
            ino = self.allocate()
        n = Node(ino, p.ino, name)
        n.lower = rel
        n.sealed = rel in self.lower.hidden
        n.mode = st.st_mode
        n.st = st
        if stat.S_ISREG(st.st_mode) and in_git(rel):
            # No watch covers `.git`, and the kernel drops no page on new attributes alone
            # (fs.py, `auto_inval_data`): a real file that changed gets a node of its own, one
            # the kernel holds nothing of (an invalidation from within a request could wait on
            # a READ of that very inode).
            n.version = identity(st)
        self.nodes[ino] = n
        self.lower_index[rel] = ino
        return n

    def _retargeted(self, n: Node, rel: bytes) -> bool:
        """Whether the worktree's symlink at `rel` says something else than lower node `n`
        told the kernel, which keeps a symlink's target until its inode is invalidated
        (`cache_symlinks`, fs.py). Below `.git`, which no watch covers, nothing invalidates it:
        the name then gets a new node, which the kernel reads anew (an invalidation from
        within a request could wait on a READLINK of that very inode)."""
        try:
            return self.lower.readlink(rel) != n.target
        except OSError:
            return True

    def allocate(self) -> int:
        while True:
            ino = self.next_ino
            self.next_ino += 1
            # (a crash may have left a data file of a number it had not yet recorded as used)
            if ino not in self.nodes and ino not in self.data.stray:
                self.pending.meta["next_ino"] = self.next_ino
                return ino

    # ---------------------------------------------------------------- the kernel's references

    def lookup(self, parent: int, name: bytes) -> Node | None:
        n = self.find(parent, name)
        if n is not None:
            self.count_lookup(n)
        return n

    @staticmethod
    def count_lookup(n: Node) -> None:
        """The kernel was handed `n` by a lookup or a listing."""
        n.lookups += 1

    def forget(self, ino: int, count: int) -> None:
        n = self.nodes.get(ino)
        if n is None or ino == ROOT_INODE:
            return
        n.lookups = max(0, n.lookups - count)
        self.maybe_drop(n)

    def maybe_drop(self, n: Node) -> None:
        """Let go of a node nothing names or holds any more."""
        if n.lookups or n.opens:
            return
        if not n.upper:
            del self.nodes[n.ino]
            self.lower.close([n.ino])
            if n.lower is not None and self.lower_index.get(n.lower) == n.ino:
                del self.lower_index[n.lower]
        elif n.nlink == 0:
            self._delete_upper(n)

    def _delete_upper(self, n: Node) -> None:
        del self.nodes[n.ino]
        self.pending.deleted.add(n.ino)
        if n.ino in self.data.kept:
            # a file a rewind removed: its data file, if any, is no longer this node's
            self.data.let_go(n.ino)
        elif stat.S_ISREG(n.mode) and n.data == 1:
            self.pending.data_files.add(n.ino)
        self.pending.nodes.discard(n.ino)
        self.pending.inline.pop(n.ino, None)
        self.data.forget(n.ino)
        self.lower.close([n.ino])

    # ---------------------------------------------------------------- copy-up

    def check_writable(self) -> None:
        if self.readonly:
            raise err(errno.EROFS)

    def make_upper(self, n: Node) -> None:
        """Give a lower node a row of its own (metadata only; data stays in the lower file)."""
        if not n.upper:
            self.before_copy_up(n)  # (the git unit, taken first, may copy up this very node)
        if n.upper:
            return
        if n.sealed:
            raise err(errno.EACCES)
        parent = self.node(n.parent)
        self.make_upper(parent)
        assert n.lower is not None
        st = self.lower.stat(n.lower)
        if st is None:
            raise err(errno.ENOENT)
        named = n.nlink != 0
        fill_from_stat(n, st)
        n.upper = True
        n.origin = n.lower
        n.origin_stamp = stamp(st)
        n.nlink = 1 if named else 0
        if stat.S_ISDIR(st.st_mode):
            n.entries = {}
        elif stat.S_ISREG(st.st_mode):
            n.data = 0
        elif stat.S_ISLNK(st.st_mode):
            n.target = self.lower.readlink(n.lower)
        if self.lower_index.get(n.lower) == n.ino:
            del self.lower_index[n.lower]
        n.lower = None
        xattrs = self.lower.xattrs(n.origin)
        if xattrs:
            n.xattrs = xattrs
            for key, value in xattrs.items():
                self.pending.xattrs[(n.ino, key)] = value
        if named:
            self.set_entry(parent, n.name, n.ino)
        self.pending.nodes.add(n.ino)

    def set_entry(self, parent: Node, name: bytes, ino: int) -> None:
        """Name `ino` (0: a whiteout) in upper directory `parent`."""
        assert parent.entries is not None
        parent.entries[name] = ino
        if ino and self.nodes[ino].is_dir:
            parent.subdirs = None
        self.pending.dentries[(parent.ino, name)] = ino
        if ino == 0:
            parent.quiet_since = time.monotonic_ns()

    # ---------------------------------------------------------------- directory listings

    def listing(self, n: Node) -> list[bytes]:
        """Names in directory `n` of the view, in a stable order."""
        return [name for name, _ in self.children(n)]

    def children(self, n: Node) -> Iterator[tuple[bytes, bool]]:
        """(name, is it a directory) for every name in directory `n` of the view."""
        if not n.is_dir:
            raise err(errno.ENOTDIR)
        entries = n.entries or {}
        rel = n.worktree_rel
        if rel is not None and not n.sealed:
            for name, is_dir in self.lower.listing(rel):
                if name not in entries:
                    yield name, is_dir
        # A linked worktree's common dir, the session's own, is still not listed (found by
        # name, as the real one is: `LowerLayer`), as a worktree's git dir is not.
        common = GIT_COMMON if n.ino == ROOT_INODE and self.lower.redirects else None
        for name in sorted(entries):
            ino = entries[name]
            if ino and name != common:
                yield name, self.nodes[ino].is_dir

    def subdirs(self, n: Node) -> int:
        """How many directories upper directory `n` shows (counted once, then kept)."""
        if n.subdirs is None:
            n.subdirs = sum(1 for _, is_dir in self.children(n) if is_dir)
        return n.subdirs


def fill_from_stat(n: Node, st: os.stat_result) -> None:
    n.mode, n.uid, n.gid, n.rdev = st.st_mode, st.st_uid, st.st_gid, st.st_rdev
    n.size = st.st_size
    n.atime_ns, n.mtime_ns, n.ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
