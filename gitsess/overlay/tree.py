"""The merged view of a session: the lower worktree on disk plus the upper layer in memory.

This is the filesystem's logic without FUSE: every operation takes inode numbers and names and
raises `OSError` with the errno a local filesystem would give (the adapter turns it into a
`FUSEError`; the CLI-side readers never import pyfuse3 and trio). The FUSE adapter (`fs.py`) and
the offline reader (`view.py`) both stand on it.

Two kinds of node live here. Lower nodes are objects of the worktree the session has not
touched: nothing about them is stored, their inode number is the worktree's own, and their
attributes are read from disk on demand. Upper nodes are objects the session created or
changed: their metadata is held in memory and persisted in delta.db through `DeltaStore`, their
file contents are written straight into data files beside it.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apsw

from gitsess import libc
from gitsess.durable import fsync_dir, nearly_full
from gitsess.overlay import acl, longpath
from gitsess.overlay.audit import Audit
from gitsess.overlay.delta import FIRST_ALLOCATED_INO, INLINE, Batch, DeltaStore, NodeRow
from gitsess.overlay.fdcache import FdCache, same_file
from gitsess.overlay.fsmonitor import Journal
from gitsess.overlay.writebehind import WriteBehind

ROOT_INODE = 1  # what FUSE calls the root
NAME_MAX = 255
# renameat2(2) flags
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4  # leaves an overlay whiteout (a character device 0:0) at the old name
# The worktree's own `.git` is the session's own copy-on-write, like every other path; only its
# object store (append-only, named by content) is the real one, shared (see `passthrough`).
GIT = b".git"
GIT_OBJECTS = b".git/objects"
# fallocate(2) modes served (those the kernel passes on to a FUSE filesystem)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
# The size a directory the session made shows, as on ext4 (one block).
DIR_SIZE = 4096
# A linked worktree's `.git` is a file naming its admin dir in the common dir. The view shows a
# directory there instead: the admin dir, with the common dir below it as `common` (what the
# view's `commondir` names), so that git's whole state is in the view and copy-on-write.
GIT_COMMON = b".git/common"
SHARED_OBJECTS = (GIT_OBJECTS, GIT_COMMON + b"/objects")
# A whiteout for a lower name is written only once its directory has been quiet this long, so
# `rm -rf` of a lower tree ends as one whiteout for the top directory, not one row per file.
WHITEOUT_SETTLE_NS = 1_000_000_000
# Lower directory listings kept between readdirs (about 100 bytes a name).
LISTINGS_KEPT = 20_000
# Data files kept open between requests.
DATA_FDS_OPEN = 64
# Files up to this size keep their bytes in delta.db (see store.INLINE), committed with their
# metadata; a file that grows past it moves to a data file for good.
INLINE_MAX = 16 * 1024
# Worktree files kept open between reads. Without OPEN requests (fs.INODE_FH) nothing says
# when a reader is done with a file, so its descriptor stays until it is among the oldest.
LOWER_FDS_OPEN = 256


class Node:
    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "data",
        "entries",
        "gid",
        "ino",
        "lookups",
        "lower",
        "mode",
        "mtime_ns",
        "name",
        "nlink",
        "open_stamp",
        "opens",
        "origin",
        "origin_stamp",
        "parent",
        "passthrough",
        "quiet_since",
        "rdev",
        "sealed",
        "size",
        "st",
        "subdirs",
        "target",
        "uid",
        "upper",
        "xattrs",
    )

    def __init__(self, ino: int, parent: int, name: bytes) -> None:
        self.ino = ino
        self.upper = False
        self.lower: bytes | None = None  # lower path (relative) of a lower node
        self.passthrough = False
        # A hidden path (the state dir): found by name, so that `gitsess run` can bind the real
        # one over it, but never listed, never changed, and empty in the view.
        self.sealed = False
        self.parent = parent
        self.name = name
        self.mode = 0
        self.uid = 0
        self.gid = 0
        self.rdev = 0
        self.size = 0
        self.atime_ns = 0
        self.mtime_ns = 0
        self.ctime_ns = 0
        self.nlink = 1
        self.origin: bytes | None = None
        self.data = 1
        self.target: bytes | None = None
        self.origin_stamp: tuple[int, int, int] | None = None  # mode, size, mtime_ns
        # A passed-through file as its last open found it: inode, size, mtime, ctime (ns).
        self.open_stamp: tuple[int, int, int, int] | None = None
        self.entries: dict[bytes, int] | None = None
        self.lookups = 0
        self.opens = 0
        self.xattrs: dict[bytes, bytes] | None = None
        self.quiet_since = 0
        # The lstat taken by the lookup that found a lower node, for the getattr that follows.
        self.st: os.stat_result | None = None
        # Subdirectories of an upper directory, counted when first needed (st_nlink).
        self.subdirs: int | None = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def worktree_rel(self) -> bytes | None:
        """The worktree path whose object this node shows (a directory's merged entries, a
        file's content until it has data of its own), None if none."""
        return self.origin if self.upper else self.lower

    def row(self) -> NodeRow:
        om, osz, omt = self.origin_stamp or (None, None, None)
        return NodeRow(
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.rdev,
            self.size,
            self.atime_ns,
            self.mtime_ns,
            self.ctime_ns,
            self.nlink,
            self.origin,
            self.data,
            self.target,
            om,
            osz,
            omt,
        )


@dataclass
class Attr:
    """What getattr answers; the FUSE adapter copies it into EntryAttributes."""

    ino: int
    mode: int
    nlink: int
    uid: int
    gid: int
    rdev: int
    size: int
    blocks: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _no_space(e: apsw.Error, path: str) -> bool:
    return isinstance(e, apsw.FullError) or nearly_full(os.path.dirname(path) or ".")


def _linked_git(root: bytes, session_dir: str) -> dict[bytes, bytes]:
    """For a linked worktree (`root/.git` a `gitdir:` file): the view's `.git` is its admin
    dir, `.git/common` the common dir, and `.git/commondir` a file of the session's saying
    so. Empty for a main worktree, or when `.git` is anything else."""
    try:
        with open(root + b"/.git", "rb") as f:
            head = f.read(4096)
    except OSError:
        return {}
    if not head.startswith(b"gitdir: "):
        return {}
    admin = os.path.join(root, head[len(b"gitdir: ") :].strip())
    try:
        with open(os.path.join(admin, b"commondir"), "rb") as f:
            common = os.path.normpath(os.path.join(admin, f.read().strip()))
    except OSError:
        return {}
    pointer = os.path.join(os.fsencode(session_dir), b"commondir")
    if not os.path.exists(pointer):
        try:
            with open(pointer, "wb") as f:
                f.write(b"common\n")
        except OSError:
            return {}
    return {GIT: os.path.normpath(admin), GIT_COMMON: common, b".git/commondir": pointer}


def _name_max(root: bytes) -> int:
    """The longest name the worktree's filesystem takes; POSIX's usual NAME_MAX when the
    worktree is gone (`ls` still counts what such a session holds)."""
    try:
        return os.statvfs(root).f_namemax
    except OSError:
        return NAME_MAX


def in_git(rel: bytes | None) -> bool:
    """Whether a worktree path is the worktree's `.git` or below it: git changes those from
    outside the session with no worktree watch to say so."""
    return rel is not None and (rel == GIT or rel.startswith(GIT + b"/"))


def _join(base: bytes, name: bytes) -> bytes:
    return base + b"/" + name if base else name


class Tree:
    def __init__(
        self, store: DeltaStore, lower_root: str, hidden: set[bytes], *, writer: bool = True
    ) -> None:
        """`writer` is False for readers beside a live daemon: they never change delta.db."""
        self.store = store
        self.root = os.fsencode(lower_root).rstrip(b"/") or b"/"
        self.hidden = set(hidden)
        # View paths served from elsewhere than below `root` (a linked worktree's git dirs).
        self.redirects = _linked_git(self.root, os.path.dirname(store.data_dir))
        if self.redirects:
            self.hidden.add(GIT_COMMON + b"/gitsess")
        # Names longer than the worktree's filesystem takes are refused as it would refuse them:
        # a name only the session holds must still fit there when it is applied.
        self.name_max = _name_max(self.root)
        self.nodes: dict[int, Node] = {}
        self.lower_index: dict[bytes, int] = {}  # lower path -> ino of its lower node
        self._listings: dict[bytes, tuple[int, list[tuple[bytes, bool]]]] = {}
        self.next_ino = int(store.meta("next_ino", 0))
        self.writer = writer
        self.readonly = not writer
        self._pending = _Pending()
        self._data_fds = FdCache(DATA_FDS_OPEN)
        self._lower_fds = FdCache(LOWER_FDS_OPEN)
        self._unsynced: set[int] = set()  # data files written since the last durable commit
        self._stray: set[int] = set()  # data files of no node, still to remove (see _load)
        self._write_behind = WriteBehind()
        self.audit = Audit(next_process_id=store.next_process_id())
        self.journal = Journal()
        # Whether the worktree watch is in place (see `catch_up`). Until then nothing tells the
        # kernel that a name or attribute it caches changed in the worktree, so what it learns
        # is cached for a second only: a name it was told is missing (which no invalidation
        # reaches, as nothing records it), or a directory's, which the catch-up leaves alone.
        self.watched = False
        self._load()

    # ---------------------------------------------------------------- loading and persistence

    def _load(self) -> None:
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

    def commit(self, *, durable: bool = False, settle: bool = True) -> None:
        """Persist everything changed since the last commit in one transaction.

        With `settle`, whiteouts of directories still being emptied wait for a later commit.
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
                settle
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
            raise _err(errno.ENOSPC if _no_space(e, self.store.path) else errno.EIO) from None
        self.store.remove_data(p.data_files)
        self._pending = _Pending()
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
            raise _err(errno.ESTALE) from None

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
            raise _err(errno.ENAMETOOLONG)

    def _child_lower_rel(self, p: Node, name: bytes) -> bytes | None:
        """The lower path a name in `p` falls through to, or None when `p` hides the lower."""
        if p.upper:
            return None if p.origin is None else _join(p.origin, name)
        return _join(p.lower or b"", name)

    def find(self, parent: int, name: bytes) -> Node | None:
        """The node `name` in directory `parent` names, without counting a lookup."""
        self._check_name(name)
        p = self.node(parent)
        if not p.is_dir:
            raise _err(errno.ENOTDIR)
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
        n.passthrough = p.passthrough or rel in SHARED_OBJECTS
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
        if stat.S_ISREG(n.mode) and n.data == 1:
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
        """What the worktree watch could not see before it was in place (it starts while the
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
                and _stamp(self._lower_stat(n.origin)) != n.origin_stamp
            ):
                self._pending.drift[os.fsdecode(n.origin)] = now
            if n.ino != ROOT_INODE and not n.passthrough:
                inodes.append(n.ino)
                if not n.is_dir:
                    entries.append((n.parent, n.name))
        return entries, inodes

    def lose_watch(self) -> tuple[list[tuple[int, bytes]], list[int]]:
        """The worktree watch ended: what the kernel holds is asked again, as `catch_up` does,
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
            raise _err(errno.ENOENT)
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
            raise _err(errno.ENOTDIR)
        entries = n.entries or {}
        rel = n.worktree_rel
        if rel is not None and not n.sealed:
            for name, is_dir in self._lower_listing(rel):
                if name not in entries:
                    yield name, is_dir
        for name in sorted(entries):
            ino = entries[name]
            if ino:
                yield name, self.nodes[ino].is_dir

    def _lower_listing(self, rel: bytes) -> list[tuple[bytes, bool]]:
        """A lower directory's names, sorted, with their kinds; rescanned only when the
        directory's mtime moved (the worktree watch drops it too, for changes within one
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
                if _join(rel, name) not in self.hidden
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

    # ---------------------------------------------------------------- copy-up

    def make_upper(self, n: Node) -> None:
        """Give a lower node a row of its own (metadata only; data stays in the lower file)."""
        if n.upper:
            return
        if n.passthrough:
            raise AssertionError("passthrough nodes are never copied up")
        if n.sealed:
            raise _err(errno.EACCES)
        parent = self.node(n.parent)
        self.make_upper(parent)
        assert n.lower is not None
        st = self._lower_stat(n.lower)
        if st is None:
            raise _err(errno.ENOENT)
        named = n.nlink != 0
        self._fill_from_stat(n, st)
        n.upper = True
        n.origin = n.lower
        n.origin_stamp = _stamp(st)
        n.nlink = 1 if named else 0
        if stat.S_ISDIR(st.st_mode):
            n.entries = {}
        elif stat.S_ISREG(st.st_mode):
            n.data = 0
        elif stat.S_ISLNK(st.st_mode):
            n.target = longpath.call(os.readlink, self.lower_path(n.lower))
        if self.lower_index.get(n.lower) == n.ino:
            del self.lower_index[n.lower]
        n.lower = None
        xattrs = longpath.call(_lower_xattrs, self.lower_path(n.origin))
        if xattrs:
            n.xattrs = xattrs
            for key, value in xattrs.items():
                self._pending.xattrs[(n.ino, key)] = value
        if named:
            self._set_entry(parent, n.name, n.ino)
        self._pending.nodes.add(n.ino)

    def ensure_data(self, n: Node, *, keep: int | None = None) -> None:
        """Copy a file's bytes into its data file on its first data change.

        `keep` bounds how much of the lower file matters (0 for O_TRUNC: nothing is copied).
        """
        self.make_upper(n)
        if n.data:
            return
        assert n.origin is not None
        want = n.size if keep is None else min(keep, n.size)
        if want <= INLINE_MAX:
            content = b""
            if want:
                with longpath.call(open, self.lower_path(n.origin), "rb", buffering=0) as f:
                    content = f.read(want)
            self._pending.inline[n.ino] = content
            n.data = INLINE
            n.size = len(content)
            self._pending.nodes.add(n.ino)
            return
        fd = self._data_fd(n)
        os.ftruncate(fd, 0)
        copied = 0
        if want:
            src = longpath.call(os.open, self.lower_path(n.origin), os.O_RDONLY | os.O_CLOEXEC)
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
        self._unsynced.add(n.ino)
        self._pending.nodes.add(n.ino)

    def _data_fd(self, n: Node) -> int:
        """The open data file of `n`, created empty if it has none yet."""
        fd = self._open_data(n, create=True)
        assert fd is not None
        return fd

    def _open_data(self, n: Node, *, create: bool) -> int | None:
        """The open data file of `n`: None when it has none (it reads as zeros)."""
        fd = self._data_fds.get(n.ino)
        if fd is None:
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

    # ---------------------------------------------------------------- entry bookkeeping

    def _set_entry(self, parent: Node, name: bytes, ino: int) -> None:
        assert parent.entries is not None
        parent.entries[name] = ino
        if ino and self.nodes[ino].is_dir:
            parent.subdirs = None
        self._pending.dentries[(parent.ino, name)] = ino
        if ino == 0:
            parent.quiet_since = time.monotonic_ns()

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
                n.origin_stamp = _stamp(st)
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
        rel = None if parent.origin is None else _join(parent.origin, name)
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
        self.nodes[n.ino] = n
        self._set_entry(parent, name, n.ino)
        self._touch_dir(parent)
        self._pending.nodes.add(n.ino)
        return n

    def _writable_dir(self, parent: int) -> Node:
        self._check_writable()
        p = self.node(parent)
        if not p.is_dir:
            raise _err(errno.ENOTDIR)
        self.make_upper(p)
        return p

    def _check_writable(self) -> None:
        if self.readonly:
            raise _err(errno.EROFS)

    # ---------------------------------------------------------------- namespace operations

    def create(
        self, parent: int, name: bytes, mode: int, uid: int, gid: int, rdev: int = 0
    ) -> Node:
        self._check_name(name)
        p = self._writable_dir(parent)
        if self.find(parent, name) is not None:
            raise _err(errno.EEXIST)
        n = self._new_node(p, name, mode, uid, gid)
        n.rdev = rdev
        if stat.S_ISREG(mode):
            n.data = INLINE
        n.lookups += 1
        return n

    def symlink(self, parent: int, name: bytes, target: bytes, uid: int, gid: int) -> Node:
        self._check_name(name)
        p = self._writable_dir(parent)
        if self.find(parent, name) is not None:
            raise _err(errno.EEXIST)
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
            raise _err(errno.ENOENT)
        if n.is_dir:
            raise _err(errno.EISDIR)
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
            raise _err(errno.ENOENT)
        if not n.is_dir:
            raise _err(errno.ENOTDIR)
        if n.sealed:
            raise _err(errno.EBUSY)
        if not self._empty(n):
            raise _err(errno.ENOTEMPTY)
        self._rmdir_node(p, name, n)

    def _empty(self, n: Node) -> bool:
        """Whether directory `n` holds nothing, not even a hidden path (which is not listed)."""
        if next(self.children(n), None) is not None:
            return False
        rel = n.worktree_rel
        return rel is None or not any(h.rpartition(b"/")[0] == rel for h in self.hidden)

    def _rmdir_node(self, p: Node, name: bytes, n: Node) -> None:
        p.subdirs = None
        self._remove_entry(p, name)
        self._touch_dir(p)
        self._unname(n)

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
            raise _err(errno.EPERM)
        if n.passthrough:
            raise _err(errno.EXDEV)
        if self.find(new_parent, new_name) is not None:
            raise _err(errno.EEXIST)
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
            raise _err(errno.EINVAL)
        self._check_name(old_name)
        self._check_name(new_name)
        op = self._writable_dir(old_parent)
        np = self._writable_dir(new_parent)
        src = self.find(old_parent, old_name)
        if src is None:
            raise _err(errno.ENOENT)
        dst = self.find(new_parent, new_name)
        if src.sealed or (dst is not None and dst.sealed):
            raise _err(errno.EBUSY)
        if flags & RENAME_NOREPLACE and dst is not None:
            raise _err(errno.EEXIST)
        if flags & RENAME_EXCHANGE:
            if dst is None:
                raise _err(errno.ENOENT)
            self._exchange(op, old_name, src, np, new_name, dst)
            return
        if dst is src:
            return
        if dst is not None:
            if src.is_dir and not dst.is_dir:
                raise _err(errno.ENOTDIR)
            if dst.is_dir and not src.is_dir:
                raise _err(errno.EISDIR)
            if dst.is_dir and not self._empty(dst):
                raise _err(errno.ENOTEMPTY)
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

    # ---------------------------------------------------------------- metadata changes

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
    ) -> None:
        self._check_writable()
        if not n.upper and (mode, uid, gid, size, atime_ns, mtime_ns) == (None,) * 6:
            # The kernel flushing a ctime it changed itself (unlink, link): nothing to keep.
            return
        if size is not None:
            if n.is_dir:
                raise _err(errno.EISDIR)
            self.truncate(n, size)
        self.make_upper(n)
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
        self._pending.nodes.add(n.ino)

    def truncate(self, n: Node, size: int) -> None:
        self._check_writable()
        if not stat.S_ISREG(n.mode):
            raise _err(errno.EINVAL)
        self.ensure_data(n, keep=size)
        if n.data == INLINE and size > INLINE_MAX:
            self._to_data_file(n)
        if n.data == INLINE:
            content = self._inline(n)
            if len(content) > size:
                self._pending.inline[n.ino] = content[:size]
        else:
            fd = self._open_data(n, create=size > 0)
            if fd is not None:
                os.ftruncate(fd, size)
                self._unsynced.add(n.ino)
        n.size = size
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self._pending.nodes.add(n.ino)

    def fallocate(self, n: Node, mode: int, offset: int, length: int) -> None:
        """fallocate(2) of a file: its data file's (an inline or worktree file's bytes move
        into one first), which is sparse anyway, so a hole punched there takes no room."""
        self._check_writable()
        served = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE
        punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE  # a hole never changes the size
        if mode & ~served or (mode & FALLOC_FL_PUNCH_HOLE and mode != punch):
            raise _err(errno.EOPNOTSUPP)
        if offset < 0 or length <= 0:
            raise _err(errno.EINVAL)
        if not stat.S_ISREG(n.mode):
            raise _err(errno.EISDIR if n.is_dir else errno.ENODEV)
        self.ensure_data(n)
        if n.data == INLINE:
            self._to_data_file(n)
        libc.fallocate(self._data_fd(n), mode, offset, length)
        if not mode & FALLOC_FL_KEEP_SIZE:
            n.size = max(n.size, offset + length)
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self._unsynced.add(n.ino)
        self._pending.nodes.add(n.ino)

    # ---------------------------------------------------------------- file data

    def worktree_fd(self, n: Node) -> int | None:
        """The open worktree file that `n`'s content is read from; None when the content is
        the session's own."""
        return None if n.upper and n.data else self._lower_fd(n)

    def read(self, n: Node, off: int, size: int) -> bytes:
        fd = self.worktree_fd(n)
        if fd is not None:
            return os.pread(fd, size, off)
        if off >= n.size:
            return b""
        size = min(size, n.size - off)
        if n.data == INLINE:
            buf = self._inline(n)[off : off + size]
        else:
            data_fd = self._open_data(n, create=False)
            if data_fd is None and not self.writer:
                # A file of some size always has its data file (a truncate that grows one
                # makes it): the daemon removed it after a commit this reader's snapshot
                # predates. Zeros here were once committed by an apply as the file's content.
                raise OSError(
                    errno.ESTALE,
                    f"{self.path_of(n).decode(errors='replace')} changed in the "
                    "session while it was read; try again",
                )
            buf = b"" if data_fd is None else os.pread(data_fd, size, off)
        # Past the end of a sparse data file (a file extended by truncate): zeros.
        return buf if len(buf) == size else buf + bytes(size - len(buf))

    def write(self, n: Node, off: int, buf: bytes) -> int:
        self._check_writable()
        self.ensure_data(n)
        if n.data == INLINE and off + len(buf) > INLINE_MAX:
            self._to_data_file(n)
        if n.data == INLINE:
            content = bytearray(self._inline(n))
            if len(content) < off:
                content.extend(bytes(off - len(content)))
            content[off : off + len(buf)] = buf
            self._pending.inline[n.ino] = bytes(content)
            return self._written(n, off, len(buf))
        fd = self._data_fd(n)
        written = os.pwrite(fd, buf, off)
        if written < len(buf):
            # Only a full disk writes short: take back what it added past the file's end.
            if off + written > n.size:
                os.ftruncate(fd, max(n.size, off))
            raise _err(errno.ENOSPC)
        self._unsynced.add(n.ino)
        self._write_behind.wrote(n.ino, fd, written)
        return self._written(n, off, written)

    def _written(self, n: Node, off: int, written: int) -> int:
        n.size = max(n.size, off + written)
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self._pending.nodes.add(n.ino)
        return written

    def _inline(self, n: Node) -> bytes:
        """An inline file's bytes (up to its size; any shorter, the rest reads as zeros)."""
        if n.ino in self._pending.inline:
            return self._pending.inline[n.ino] or b""
        if not n.size:
            return b""  # a file just made, say: no query of delta.db for its first write
        return self.store.inline(n.ino)

    def _to_data_file(self, n: Node) -> None:
        """Move an inline file that grows past INLINE_MAX into a data file."""
        content = self._inline(n)
        fd = self._data_fd(n)
        os.ftruncate(fd, 0)
        if os.pwrite(fd, content, 0) < len(content):
            os.ftruncate(fd, 0)
            raise _err(errno.ENOSPC)
        n.data = 1
        self._pending.inline[n.ino] = None
        self._unsynced.add(n.ino)
        self._pending.nodes.add(n.ino)

    def _lower_fd(self, n: Node) -> int:
        fd = self._lower_fds.get(n.ino)
        rel = n.worktree_rel
        assert rel is not None
        if fd is not None and self.watched and not in_git(rel):
            return fd
        path = self.lower_path(rel)
        # Unwatched (`.git` never is), nothing closes the descriptor of a file replaced or
        # removed: each read checks that the path still names it, as an open of the path would.
        if fd is not None and _names(path, fd):
            return fd
        fd = longpath.call(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
        self._lower_fds.put(n.ino, fd)
        return fd

    def close_lower(self, inodes: Iterable[int]) -> None:
        """Close the worktree descriptors of these nodes: their next read opens the file anew."""
        self._lower_fds.close(inodes)

    def opened(self, n: Node) -> None:
        n.opens += 1

    def released(self, n: Node) -> None:
        n.opens -= 1
        self._maybe_drop(n)

    def readlink(self, n: Node) -> bytes:
        if n.upper:
            if n.target is None:
                raise _err(errno.EINVAL)
            return n.target
        assert n.lower is not None
        try:
            return longpath.call(os.readlink, self.lower_path(n.lower))
        except OSError as e:
            raise _err(e.errno or errno.EIO) from None

    # ---------------------------------------------------------------- extended attributes

    def getxattr(self, n: Node, name: bytes) -> bytes:
        table = self._xattr_table(n)
        if name not in table:
            raise _err(errno.ENODATA)
        return table[name]

    def listxattr(self, n: Node) -> list[bytes]:
        return sorted(self._xattr_table(n))

    def setxattr(self, n: Node, name: bytes, value: bytes) -> None:
        self._check_writable()
        if name == acl.ACCESS:
            bits, minimal = acl.mode_bits(value)
            self.setattr(n, mode=(n.mode & 0o7000) | bits)
            if minimal:  # the mode says it all: nothing kept, as on a local filesystem
                if name in self._xattr_table(n):
                    self.removexattr(n, name)
                return
        self.make_upper(n)
        if n.xattrs is None:
            n.xattrs = {}
        n.xattrs[name] = value
        n.ctime_ns = time.time_ns()
        self._pending.xattrs[(n.ino, name)] = value
        self._pending.nodes.add(n.ino)

    def removexattr(self, n: Node, name: bytes) -> None:
        self._check_writable()
        if name not in self._xattr_table(n):
            raise _err(errno.ENODATA)
        self.make_upper(n)
        assert n.xattrs is not None
        del n.xattrs[name]
        n.ctime_ns = time.time_ns()
        self._pending.xattrs[(n.ino, name)] = None
        self._pending.nodes.add(n.ino)

    def _xattr_table(self, n: Node) -> dict[bytes, bytes]:
        if n.upper:
            return n.xattrs or {}
        assert n.lower is not None
        return longpath.call(_lower_xattrs, self.lower_path(n.lower))


class _Pending:
    def __init__(self) -> None:
        self.deleted: set[int] = set()
        # deleted nodes with a data file to unlink once the commit lands (the others have none)
        self.data_files: set[int] = set()
        self.emptied: set[int] = set()  # directories removed while the kernel still holds them
        self.nodes: set[int] = set()
        self.dentries: dict[tuple[int, bytes], int | None] = {}
        self.xattrs: dict[tuple[int, bytes], bytes | None] = {}
        self.meta: dict[str, int | str] = {}
        self.drift: dict[str, int] = {}
        self.undrift: set[str] = set()
        self.inline: dict[int, bytes | None] = {}  # see Batch.inline

    def any(self) -> bool:
        return bool(
            self.deleted
            or self.nodes
            or self.dentries
            or self.xattrs
            or self.meta
            or self.drift
            or self.undrift
            or self.inline
        )


def _names(path: bytes, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not when it names none)."""
    try:
        return longpath.call(same_file, path, fd)
    except OSError:
        return False


def _stamp(st: os.stat_result | None) -> tuple[int, int, int] | None:
    """What a copy-up records of its worktree original, to tell later whether it changed."""
    return None if st is None else (st.st_mode, st.st_size, st.st_mtime_ns)


def _lower_xattrs(path: bytes) -> dict[bytes, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    out: dict[bytes, bytes] = {}
    for name in names:
        try:
            out[os.fsencode(name)] = os.getxattr(path, name, follow_symlinks=False)
        except OSError:
            continue
    return out
