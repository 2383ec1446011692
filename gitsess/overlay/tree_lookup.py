"""The merged view's nodes as loaded, committed, found, stat'ed and listed: the base of
`Tree` (`tree.py`), which the data (`tree_data.py`) and namespace operations build on.

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
`ENOSPC`. On load, nodes not reachable from the root are deleted and a data file longer than
its node's committed size is cut to it; data files no node reads are removed by a thread once
the daemon serves the view (`remove_stray_data`), and their numbers are given to no node
until then.

Until the lower watch is in place (`watched`), every entry, attribute and "missing" is cached
by the kernel for 1 s instead of 300 s; `catch_up` records drift and invalidates what the
kernel may hold once it is. Names longer than the worktree's `f_namemax` are `ENAMETOOLONG`
everywhere, since FUSE checks only its own limit.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterable, Iterator

import apsw

from gitsess.durable import fsync_dir, nearly_full
from gitsess.overlay import longpath
from gitsess.overlay.audit import Audit
from gitsess.overlay.delta import FIRST_ALLOCATED_INO, Batch, DeltaStore
from gitsess.overlay.fdcache import FdCache
from gitsess.overlay.fsmonitor import FsmonitorJournal
from gitsess.overlay.gitdir import GIT, GIT_COMMON, in_git, linked_git, object_store
from gitsess.overlay.nodes import ROOT_INODE, Attr, Node, Pending, err, join, stamp
from gitsess.overlay.replaced import Replaced
from gitsess.overlay.writebehind import WriteBehind

NAME_MAX = 255
# The size a directory the session made shows, as on ext4 (one block).
DIR_SIZE = 4096
# A whiteout for a lower name is written only once its directory has been quiet this long, so
# `rm -rf` of a lower tree ends as one whiteout for the top directory, not one row per file.
WHITEOUT_SETTLE_NS = 1_000_000_000
# Lower directory listings kept between readdirs (about 100 bytes a name).
LISTINGS_KEPT = 20_000
# Data files kept open between requests.
DATA_FDS_OPEN = 64
# Worktree files kept open between reads. Without OPEN requests (fs.py's zero-message opens)
# nothing says when a reader is done with a file, so its descriptor stays until it is among the
# oldest.
LOWER_FDS_OPEN = 256


def _no_space(e: apsw.Error, path: str) -> bool:
    return isinstance(e, apsw.FullError) or nearly_full(os.path.dirname(path) or ".")


def _name_max(root: bytes) -> int:
    """The longest name the worktree's filesystem takes; POSIX's usual NAME_MAX when the
    worktree is gone (`ls` still counts what such a session holds)."""
    try:
        return os.statvfs(root).f_namemax
    except OSError:
        return NAME_MAX


class LookupTree:
    def __init__(
        self, store: DeltaStore, lower_root: str, hidden: set[bytes], *, writer: bool = True
    ) -> None:
        """`writer` is False for readers beside a live daemon: they never change delta.db."""
        self.store = store
        self.root = os.fsencode(lower_root).rstrip(b"/") or b"/"
        self.hidden = set(hidden)
        # View paths served from elsewhere than below `root` (a linked worktree's git dirs).
        self.redirects = linked_git(self.root, os.path.dirname(store.data_dir))
        if self.redirects:
            self.hidden.add(GIT_COMMON + b"/gitsess")
            # The view's `.git` is this worktree's admin dir: seen again in the common dir's
            # `worktrees/`, git would take its branch as checked out at another worktree.
            self.hidden.add(GIT_COMMON + b"/worktrees/" + os.path.basename(self.redirects[GIT]))
        # Names longer than the worktree's filesystem takes are refused as it would refuse them:
        # a name only the session holds must still fit there when it is applied.
        self.name_max = _name_max(self.root)
        self.nodes: dict[int, Node] = {}
        self.lower_index: dict[bytes, int] = {}  # lower path -> ino of its lower node
        self._listings: dict[bytes, tuple[int, list[tuple[bytes, bool]]]] = {}
        self.next_ino = int(store.meta("next_ino", 0))
        self.writer = writer
        self.readonly = not writer
        self._pending = Pending()
        self._data_fds = FdCache(DATA_FDS_OPEN)
        self._lower_fds = FdCache(LOWER_FDS_OPEN)
        self._unsynced: set[int] = set()  # data files written since the last durable commit
        self._stray: set[int] = set()  # data files of no node, still to remove (see _load)
        # The content a rewind took away from files the kernel holds (see `keep_content`):
        # inline bytes, or a descriptor of the old data file.
        self._kept: dict[int, bytes | int] = {}
        # The old content of files a rewind changed in place (see `DataTree.hold_replaced`).
        self.replaced = Replaced()
        self._write_behind = WriteBehind()
        self.audit = Audit(next_process_id=store.next_process_id())
        self.journal = FsmonitorJournal()
        # Whether the lower watch is in place (see `catch_up`). Until then nothing tells the
        # kernel that a name or attribute it caches changed in the worktree, so what it learns
        # is cached for a second only: a name it was told is missing (which no invalidation
        # reaches, as nothing records it), or a directory's, which the catch-up leaves alone.
        self.watched = False
        self._load()

    # ---------------------------------------------------------------- loading and persistence

    def _load(self) -> None:
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
            self._tidy_data_files()

    def let_go(self, *inodes: int) -> None:
        """Drop the content `keep_content` kept of these nodes."""
        for ino in inodes:
            kept = self._kept.pop(ino, None)
            if isinstance(kept, int):
                os.close(kept)

    def reload(self, inodes: Iterable[int]) -> list[int]:
        """After delta.db changed under this tree (a rewind): take the upper layer from it
        anew. Nodes the kernel holds keep their lookups; one the session no longer has turns
        back into the worktree's object it was copied from, or, made by the session, lives on
        without a name until the kernel forgets it, with the content `keep_content` kept of it
        (else none). Returns the inodes whose caches are stale:
        `inodes`, and every node that changed layer."""
        old = self.nodes
        self.nodes = {}
        self._listings.clear()
        self._data_fds.close_all()
        self._lower_fds.close_all()
        self._load()
        stale = set(inodes)
        for ino, n in old.items():
            new = self.nodes.get(ino)
            if new is not None:
                self.let_go(ino)
                new.lookups, new.opens = n.lookups, n.opens
                if not n.upper:
                    stale.add(ino)
                    if n.lower is not None and self.lower_index.get(n.lower) == ino:
                        del self.lower_index[n.lower]
                continue
            if not (n.lookups or n.opens) or ino == ROOT_INODE:
                self.let_go(ino)
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
                self.let_go(ino)
            else:
                if ino not in self._kept:
                    n.data = 0
                n.nlink, n.entries = 0, ({} if n.is_dir else None)
                self.nodes[ino] = n
        return sorted(stale)

    def _tidy_data_files(self) -> None:
        """After a crash: find the data files no node reads (`remove_stray_data` removes those
        of no node at all), and cut bytes written past the size that was committed (a later
        extension of the file must read them as zeros)."""
        for ino in self.store.data_files():
            n = self.nodes.get(ino)
            if n is None:
                self._stray.add(ino)  # (no stat of its own: a crash may leave thousands)
                continue
            if n.data != 1 or not stat.S_ISREG(n.mode):
                # one an inline file was moving into: it may move there again at any time
                self.store.remove_data([ino])
                continue
            path = self.store.data_path(ino)
            if os.stat(path).st_size > n.size:
                os.truncate(path, n.size)

    def remove_stray_data(self) -> None:
        """Remove the data files of no node found at load. Thread-safe, and meant for a
        thread: a session that stopped with thousands of deleted files open left gigabytes to
        unlink, and the mount must not wait for that. Until its file is gone, a number is
        given to no node (`_allocate`, `_lower_node`)."""
        for ino in list(self._stray):
            self.store.remove_data([ino])
            self._stray.discard(ino)

    def close(self) -> None:
        self._write_behind.close()
        self.let_go(*self._kept)
        self.replaced.clear()
        self._data_fds.close_all()
        self._lower_fds.close_all()

    def _create_root(self) -> None:
        st = os.lstat(self.root)
        root = Node(ROOT_INODE, ROOT_INODE, b"")
        self._fill_from_stat(root, st)
        root.upper = True
        root.origin = b""
        root.entries = {}
        self.nodes[ROOT_INODE] = root
        self._pending.nodes.add(ROOT_INODE)

    def save(self) -> None:
        """Persist everything pending now, durably, the whiteouts of directories still being
        emptied included: what a reader of delta.db that comes next (a sync, a checkpoint, a
        rewind, a stop) must find there."""
        self.commit(durable=True, hold_whiteouts=False)

    def commit(self, *, durable: bool = False, hold_whiteouts: bool = True) -> None:
        """Persist everything changed since the last commit in one transaction.

        With `hold_whiteouts`, whiteouts of directories still being emptied wait for a later
        commit (an `rm -rf` in progress is written once, as the directory's whiteout).
        """
        p = self._pending
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
            self._sync_data()
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
        self._pending = Pending()
        self._pending.dentries = held

    def _sync_data(self) -> None:
        """Data files to stable storage before the metadata that makes them count."""
        for ino in self._unsynced:
            n = self.nodes.get(ino)
            if n is None:
                continue
            fd = self._open_data(n, create=False)
            if fd is not None:
                os.fdatasync(fd)
            self._write_behind.forget(ino)
        if self._unsynced:
            fsync_dir(self.store.data_dir)
        self._unsynced.clear()

    @property
    def has_pending(self) -> bool:
        return self._pending.any() or bool(self.audit.events)

    # ---------------------------------------------------------------- node lookup

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

    def node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise err(errno.ESTALE) from None

    def lower_path(self, rel: bytes) -> bytes:
        """Where the lower object of view path `rel` is on disk."""
        if self.redirects and in_git(rel):
            for top in (GIT_COMMON, b".git/commondir", GIT):
                if rel == top or rel.startswith(top + b"/"):
                    return self.redirects[top] + rel[len(top) :]
        return self.root + b"/" + rel if rel else self.root

    def _lower_stat(self, rel: bytes) -> os.stat_result | None:
        try:
            return longpath.call(os.lstat, self.lower_path(rel))
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            return None

    def _check_name(self, name: bytes) -> None:
        if len(name) > self.name_max:
            raise err(errno.ENAMETOOLONG)

    def _child_lower_rel(self, p: Node, name: bytes) -> bytes | None:
        """The lower path a name in `p` falls through to, or None when `p` hides the lower."""
        if p.upper:
            return None if p.origin is None else join(p.origin, name)
        return join(p.lower or b"", name)

    def find(self, parent: int, name: bytes) -> Node | None:
        """The node `name` in directory `parent` names, without counting a lookup."""
        self._check_name(name)
        p = self.node(parent)
        if not p.is_dir:
            raise err(errno.ENOTDIR)
        if p.entries is not None and name in p.entries:
            ino = p.entries[name]
            return self.nodes[ino] if ino else None
        rel = self._child_lower_rel(p, name)
        if rel is None or p.sealed:
            return None
        st = self._lower_stat(rel)
        if st is None:
            return None
        return self._lower_node(rel, st, p, name)

    def known(self, p: Node, name: bytes) -> Node | None:
        """The node held for `name` in directory `p`, found without touching the disk; None
        when none is held (then `find` asks the worktree)."""
        if p.entries is not None and name in p.entries:
            ino = p.entries[name]
            return self.nodes[ino] if ino else None
        rel = self._child_lower_rel(p, name)
        n = self.nodes.get(self.lower_index.get(rel, 0)) if rel is not None else None
        if n is None or n.upper or n.lower != rel or (n.parent, n.name) != (p.ino, name):
            return None
        return n

    def _lower_node(self, rel: bytes, st: os.stat_result, p: Node, name: bytes) -> Node:
        ino = self.lower_index.get(rel)
        if ino is not None:
            n = self.nodes.get(ino)
            same_type = n is not None and stat.S_IFMT(n.mode) == stat.S_IFMT(st.st_mode)
            if n is not None and not n.upper and n.lower == rel and same_type:
                n.parent, n.name = p.ino, name
                n.st = st
                return n
        ino = st.st_ino
        taken = ino in self.nodes or ino in self._pending.deleted or ino in self._stray
        if ino == ROOT_INODE or taken or ino >= FIRST_ALLOCATED_INO:
            # The worktree's number is taken (by an object the session moved or created, by a
            # lower object replaced outside the session, or by one whose deletion the next
            # commit writes, or a stray data file not yet removed, with its data): give this
            # one a fresh number.
            ino = self._allocate()
        n = Node(ino, p.ino, name)
        n.lower = rel
        n.sealed = rel in self.hidden
        n.mode = st.st_mode
        n.st = st
        self.nodes[ino] = n
        self.lower_index[rel] = ino
        return n

    def _allocate(self) -> int:
        while True:
            ino = self.next_ino
            self.next_ino += 1
            # (a crash may have left a data file of a number it had not yet recorded as used)
            if ino not in self.nodes and ino not in self._stray:
                self._pending.meta["next_ino"] = self.next_ino
                return ino

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
        self._maybe_drop(n)

    def _maybe_drop(self, n: Node) -> None:
        if n.lookups or n.opens:
            return
        if not n.upper:
            del self.nodes[n.ino]
            self.close_lower([n.ino])
            if n.lower is not None and self.lower_index.get(n.lower) == n.ino:
                del self.lower_index[n.lower]
        elif n.nlink == 0:
            self._delete_upper(n)

    def _delete_upper(self, n: Node) -> None:
        del self.nodes[n.ino]
        self._pending.deleted.add(n.ino)
        if n.ino in self._kept:
            # a file a rewind removed: its data file, if any, is no longer this node's
            self.let_go(n.ino)
        elif stat.S_ISREG(n.mode) and n.data == 1:
            self._pending.data_files.add(n.ino)
        self._pending.nodes.discard(n.ino)
        self._pending.inline.pop(n.ino, None)
        self._unsynced.discard(n.ino)
        self._write_behind.forget(n.ino)
        self._data_fds.close([n.ino])
        self.close_lower([n.ino])

    def stale_caches(self, rels: set[bytes]) -> tuple[list[tuple[int, bytes]], list[int]]:
        """Kernel cache entries (dir ino, name) and inodes that changes to these lower paths
        make stale: names the view shows from the lower layer, and files that still follow it."""
        dirs: dict[bytes, list[int]] = {}
        follow: dict[bytes, list[int]] = {}
        copied: set[bytes] = set()
        for n in list(self.nodes.values()):
            if not n.upper or n.origin is None:
                continue
            if n.entries is not None:
                dirs.setdefault(n.origin, []).append(n.ino)
                continue
            copied.add(n.origin)
            if n.data == 0:
                follow.setdefault(n.origin, []).append(n.ino)
        entries: list[tuple[int, bytes]] = []
        inodes: list[int] = []
        now = time.time_ns()
        for rel in rels:
            self.journal.note(rel)
            parent, _, name = rel.rpartition(b"/")
            self._listings.pop(parent, None)
            shadowed = any(name in (self.nodes[d].entries or {}) for d in dirs.get(parent, ()))
            if rel in copied or shadowed:
                # The worktree changed a path the session changed too: remember the drift.
                self._pending.drift[os.fsdecode(rel)] = now
            lower_dir = self.lower_index.get(parent)
            for ino in [*dirs.get(parent, ()), *([lower_dir] if lower_dir else [])]:
                entries.append((ino, name))
                self.nodes[ino].subdirs = None
            ino = self.lower_index.get(rel)
            if ino is not None:
                inodes.append(ino)
            inodes.extend(follow.get(rel, ()))
        # A descriptor of the old file would go on reading it.
        self.close_lower(inodes)
        return entries, inodes

    def catch_up(self) -> tuple[list[tuple[int, bytes]], list[int]]:
        """What the lower watch could not see before it was in place (it starts while the
        view is already served, and nothing watches an unmounted session): records drift for
        every file the session copied whose worktree original changed since, drops the
        worktree `lstat`s kept on lower nodes, and returns, as `stale_caches` does, the kernel
        inodes of every node outside `.git`, and the entries of those that are not directories.
        A fresh lookup makes the kernel take everything about a name anew. A directory's name
        stays: an invalidated name is unhashed, and a process whose working directory it is
        could no longer `getcwd`; and invalidating a name detaches whatever is mounted on it
        (`gitsess run` binds the real `.git` there; `.git` is left out altogether, its caches
        last a second anyway). What the kernel learnt before, it caches for a second only
        (`watched`)."""
        self.watched = True
        self._lower_fds.close_all()
        now = time.time_ns()
        entries: list[tuple[int, bytes]] = []
        inodes: list[int] = []
        for n in self.nodes.values():
            n.st = None
            if (
                n.upper
                and n.entries is None
                and n.origin is not None
                and n.origin_stamp is not None
                and stamp(self._lower_stat(n.origin)) != n.origin_stamp
            ):
                self._pending.drift[os.fsdecode(n.origin)] = now
            if n.ino != ROOT_INODE:
                inodes.append(n.ino)
                if not n.is_dir:
                    entries.append((n.parent, n.name))
        return entries, inodes

    def lose_watch(self) -> tuple[list[tuple[int, bytes]], list[int]]:
        """The lower watch ended: what the kernel holds is asked again, as `catch_up` does,
        and what the daemon answers until a new watch catches up is cached for a second."""
        stale = self.catch_up()
        self.watched = False
        return stale

    # ---------------------------------------------------------------- attributes

    def lower_stat(self, n: Node) -> tuple[os.stat_result, int] | None:
        """For a node of the worktree's, its lstat (the one taken when it was found, else a
        fresh one) and its link count (0 once unlinked here while open); None for a node of
        the session's own. ENOENT when the worktree's object is gone."""
        if n.upper:
            return None
        st, n.st = n.st or self._lower_stat(n.lower or b""), None
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
            nlink, blocks = self._dir_nlink(n), (size + 511) // 512
        else:
            nlink, size, blocks = n.nlink, n.size, self._blocks(n)
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

    def _blocks(self, n: Node) -> int:
        """The 512-byte blocks a file of the session's takes: its data file's, holes left out
        (what `du` and a punched hole should show), else as many as its size needs."""
        if n.data != 1 or not stat.S_ISREG(n.mode):
            return (n.size + 511) // 512
        fd = self._data_fds.get(n.ino)
        try:
            st = os.fstat(fd) if fd is not None else os.stat(self.store.data_path(n.ino))
        except FileNotFoundError:
            return 0
        return st.st_blocks

    def lower_size(self, n: Node) -> int | None:
        """The size of what `n` shows of the worktree (a directory's merges), None if nothing."""
        rel = n.worktree_rel
        st = None if rel is None else self._lower_stat(rel)
        return None if st is None else st.st_size

    def _dir_nlink(self, n: Node) -> int:
        if n.subdirs is None:
            n.subdirs = sum(1 for _, is_dir in self.children(n) if is_dir)
        return 2 + n.subdirs

    @staticmethod
    def _fill_from_stat(n: Node, st: os.stat_result) -> None:
        n.mode, n.uid, n.gid, n.rdev = st.st_mode, st.st_uid, st.st_gid, st.st_rdev
        n.size = st.st_size
        n.atime_ns, n.mtime_ns, n.ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns

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
            for name, is_dir in self._lower_listing(rel):
                if name not in entries:
                    yield name, is_dir
        for name in sorted(entries):
            ino = entries[name]
            if ino and not self._unlisted(self.nodes[ino]):
                yield name, self.nodes[ino].is_dir

    def _unlisted(self, n: Node) -> bool:
        """Whether `n` is an empty directory of the session's in an object store that shows
        the real one (one it removed: `Tree._rmdir_in_object_store`). Found by name, as the
        real one is there, but not listed, so that its removal shows (and `rm -rf` of the
        store can remove the store)."""
        return (
            n.entries is not None
            and n.origin is not None
            and not any(n.entries.values())
            and object_store(n.origin) is not None
            and next(self.children(n), None) is None
        )

    def _lower_listing(self, rel: bytes) -> list[tuple[bytes, bool]]:
        """A lower directory's names, sorted, with their kinds; rescanned only when the
        directory's mtime moved (the lower watch drops it too, for changes within one
        clock tick)."""
        path = self.lower_path(rel)
        try:
            mtime = longpath.call(os.lstat, path).st_mtime_ns
            cached = self._listings.get(rel)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            listing = sorted(
                (name, is_dir)
                for name, is_dir in longpath.entries(path)
                if join(rel, name) not in self.hidden
            )
            if self.redirects and rel in (b"", GIT):
                # the view's `.git` is a directory, and has the common dir in it
                extra = (b".git", True) if rel == b"" else (b"common", True)
                listing = sorted({*(e for e in listing if e[0] != extra[0]), extra})
        except (FileNotFoundError, NotADirectoryError):
            return []
        if len(self._listings) >= LISTINGS_KEPT:
            self._listings.clear()
        self._listings[rel] = (mtime, listing)
        return listing

    # ---------------------------------------------------------------- open descriptors

    def _open_data(self, n: Node, *, create: bool) -> int | None:
        """The open data file of `n`: None when it has none (it reads as zeros)."""
        fd = self._data_fds.get(n.ino)
        if fd is None:
            kept = self._kept.get(n.ino)
            if isinstance(kept, int):
                return kept
            path = self.store.data_path(n.ino)
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
            self._data_fds.put(n.ino, fd)
        return fd

    def close_lower(self, inodes: Iterable[int]) -> None:
        """Close the worktree descriptors of these nodes: their next read opens the file anew."""
        self._lower_fds.close(inodes)
