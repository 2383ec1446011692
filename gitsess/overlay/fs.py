"""The FUSE adapter: pyfuse3 requests in, `Tree` operations out. It keeps no books of its own:
each change names the requesting process (`by`), and the tree's parts record its audit event
and fsmonitor journal entry (`recorder.py`), as they do for an offline writer.

The mount (options in `daemon`) has `default_permissions` (the kernel checks permissions) and no
writeback cache (each `write(2)` is a WRITE, as on fuse-overlayfs: with the cache, a file
written once cost a SETATTR of its times at close besides). Entries and attributes are cached
300 s with explicit invalidation; 1 s until the lower watch is in place; below `.git` as
`passthrough` says (the session's own directories there keep their names 300 s); negative
entries are cached too. Opens
send no request (see the comment on zero-message opens); the writer of a WRITE comes from the
request's context (patch 0008); an access ACL changes the mode, so setting or removing one
drops the inode's cached attributes. Every handler is synchronous (the host loop runs it to its
end), never logs on the hot path, and answers `EIO` for an unexpected exception instead of
stopping the filesystem.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import functools
import inspect
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import pyfuse3
from pyfuse3 import (
    EntryAttributes,
    FileHandleT,
    FileInfo,
    FileNameT,
    FlagT,
    FUSEError,
    InodeT,
    ModeT,
    ReaddirToken,
    RequestContext,
    SetattrFields,
    StatvfsData,
    XAttrNameT,
)

from gitsess.overlay import acl, pyfuse3_build
from gitsess.overlay import passthrough as pt
from gitsess.overlay.gitdir import GIT, in_git
from gitsess.overlay.listahead import SUBDIRS, ListAhead
from gitsess.overlay.lower_layer import LISTINGS_KEPT
from gitsess.overlay.nodes import Node
from gitsess.overlay.tree import Tree

# Everything below is written for gitsess's build of pyfuse3 (patches/pyfuse3/): refuse another.
pyfuse3_build.require()

log = logging.getLogger("gitsess.fs")
T = TypeVar("T")

# Everything the kernel caches is invalidated explicitly when the worktree changes underneath,
# so the timeouts can be long; `.git` is written by git from both sides, so it gets short ones.
TIMEOUT = 300.0
GIT_TIMEOUT = 1.0


# Zero-message opens: the handlers get the inode number as `fh` when the kernel sends none
# (patch 0001), and `open` and `opendir` answer ENOSYS: the kernel stops sending OPEN, OPENDIR,
# RELEASE and RELEASEDIR, and keeps every file's pages and every directory listing in its page
# cache until told they changed, so a warm read of a file or a warm `find` sends no request at
# all. CREATE hands out the inode number as its handle too: from the first `open` answered
# ENOSYS on, the kernel sends no RELEASE for any file, not even one made by CREATE, so a handle
# kept for it would never be let go (nor the file's node, nor the data of a file unlinked since).

# `read` answers with a slice of an open file (patch 0006), spliced into the FUSE device: the
# data is not copied into Python and out again (a cold sequential read of a big worktree file
# spent two thirds of the daemon's CPU in those copies). It returns one where bytes are due
# (pyfuse3 types `read` for bytes). Smaller reads are copied: the splice's extra system calls
# cost more.
FILE_SLICE = cast(Callable[[int, int, int], bytes], pyfuse3.FileSlice)
SPLICE_MIN = 64 * 1024

# Listings of directories being read, kept for the requests that continue them.
LISTINGS_OPEN = 1024

# Directories larger than this in the worktree (ext4: some 1,000 entries of short names), or
# with more entries of the session's own, are not listed ahead of lookups (see listahead.py).
# The worktree's size of a directory costs one lstat; counting its entries cost a listing.
LIST_AHEAD_MAX_BYTES = 32 * 1024
LIST_AHEAD_MAX = 512


# A name's readdir offset is its hash under this mask (1 for 0): it stays valid whatever else
# the directory gains or loses, as entries are served in cookie order and a reader resumes
# after the last cookie it got.
COOKIE_MASK = 0x3FFF_FFFF_FFFF_FFFF


def _guarded(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """An unexpected exception in a handler would stop the whole filesystem: answer EIO."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except FUSEError:
            raise
        except OSError as e:
            raise FUSEError(e.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed", fn.__name__)
            raise FUSEError(errno.EIO) from None

    return wrapper


def _guard_handlers(cls: type[pyfuse3.Operations]) -> type[pyfuse3.Operations]:
    for name, fn in list(vars(cls).items()):
        if inspect.iscoroutinefunction(fn) and not name.startswith("_"):
            setattr(cls, name, _guarded(fn))
    return cls


@_guard_handlers
class Filesystem(pyfuse3.Operations):
    supports_dot_lookup = False
    # Off, as fuse-overlayfs runs: each write(2) is a WRITE request. With the cache, a file
    # written once cost one request more (a SETATTR of the times the kernel kept, at close),
    # `create` of 2,000 files took a third longer and 500 MiB + fsync longer too; only runs of
    # small writes to one file are cheaper with it (docs/PERFORMANCE.md).
    enable_writeback_cache = False
    # Without OPEN requests an O_TRUNC arrives as a SETATTR of the size (patch 0002).
    atomic_o_trunc = False
    # Off (patch 0012): with it, a reply whose mtime differs from the kernel's drops the file's
    # pages, and a WRITE leaves the kernel's mtime as it was, so each append to a file read
    # before cost its next reader a READ and a GETATTR (a commit of 5,000 appended files
    # 1.7x native). What changes behind the kernel is told instead: the lower watch and a
    # rewind invalidate, a file below `.git` changed outside is a new node
    # (`NodeTable._lower_node`), the index's variants differ in size (`index_view.py`).
    auto_inval_data = False
    # The writer of each WRITE (patch 0008): nothing else names it without OPEN requests.
    write_context = True
    # Symlink targets stay in the kernel's page cache (patch 0011): every path through the
    # `.git/objects` symlink (some four per object git writes) was a READLINK. Where an inode
    # gets other content (a rewind, a worktree change the watch reports) the daemon
    # invalidates it whole, pages with it; below `.git`, which no watch covers, a symlink found
    # retargeted is a new node (`NodeTable._retargeted`).
    cache_symlinks = True

    def __init__(self, tree: Tree, ahead: ListAhead | None = None) -> None:
        super().__init__()
        self.tree = tree
        self.ahead = ahead
        # (the parts the per-name path asks, past the facade: a call less each, on every name)
        self.lower = tree.lower
        self.table = tree.table
        self._lower_stat = tree.attrs.lower_stat
        self.listings: dict[int, tuple[list[int], list[bytes]]] = {}
        # Worktree directories' listings in cookie order, with the worktree listing each was
        # made of (see `_listing`).
        self.cookie_orders: dict[
            int, tuple[list[tuple[bytes, bool]], tuple[list[int], list[bytes]]]
        ] = {}
        self.git_reads = pt.ReadFds()

    # ---------------------------------------------------------------- helpers

    def _entry(self, n: Node, opener: int | None = None) -> EntryAttributes:
        follows = pt.follows_git(n)
        timeout = GIT_TIMEOUT if follows or not self.lower.watched else TIMEOUT
        e = self._attributes(n, timeout)
        if not follows:
            return e  # (all of the rest is for what follows git: the index is below `.git`)
        shown = self._shown_index(n, opener)
        if shown is not None:
            assert self.tree.index_view is not None
            e.st_size = len(shown)
            e.st_mtime_ns = self.tree.index_view.mtime_ns(e.st_mtime_ns)
        if n.upper:
            # A directory the session made or owns below `.git` (`refs/heads/topic`, made by
            # git inside): its name is the session's own, whatever git does outside, and the
            # daemon invalidates it when the session drops or rewinds it; only its attributes
            # and listing merge with the real directory.
            e.entry_timeout = TIMEOUT
        if stat.S_ISREG(n.mode):
            # git changes these from both sides of the view, and with no OPEN the kernel keeps
            # their pages: each open(2) or stat(2) of one by name is a LOOKUP, which names a
            # new node once the real file changed (`NodeTable._lower_node`), one with no pages.
            e.entry_timeout = 0.0
        return e

    def _attributes(self, n: Node, timeout: float) -> EntryAttributes:
        e = self._current_attributes(n, timeout)
        if self.tree.replaced:
            held = self.tree.replaced.attributes(n.ino)
            if held is not None:
                # what a live rewind replaced, until the kernel dropped it (replaced.py)
                e.st_size, e.st_mtime_ns, e.st_ctime_ns = held
        return e

    def _current_attributes(self, n: Node, timeout: float) -> EntryAttributes:
        lower = self._lower_stat(n)
        if lower is not None:
            # Filled in C (patch 0005): field by field from Python that was some 2 us of every
            # entry of a cold listing.
            st, nlink = lower
            return pyfuse3.entry_from_stat(st, InodeT(n.ino), nlink, timeout)
        a = self.tree.getattr(n)
        e = EntryAttributes()
        e.st_ino = InodeT(a.ino)
        e.generation = 0
        e.entry_timeout = timeout
        e.attr_timeout = timeout
        e.st_mode = ModeT(a.mode)
        e.st_nlink = a.nlink
        e.st_uid = a.uid
        e.st_gid = a.gid
        e.st_rdev = a.rdev
        e.st_size = a.size
        e.st_blksize = 4096
        e.st_blocks = a.blocks
        e.st_atime_ns = a.atime_ns
        e.st_mtime_ns = a.mtime_ns
        e.st_ctime_ns = a.ctime_ns
        return e

    def _shown_index(self, n: Node, opener: int | None = None) -> bytes | None:
        """What the view shows as the index while it follows the real one (`index_view.py`),
        to `opener` (the pid of a LOOKUP: its variant) or as shown now."""
        shown = self.tree.index_view
        if shown is None or n.upper or n.lower != self.lower.git.index_file:
            return None
        return shown.shown(opener)

    def _negative(self, parent: Node) -> EntryAttributes:
        # A zero inode is a cacheable "does not exist": the kernel stops asking until told
        # (nothing tells it of what git makes below `.git` from outside the view, so there
        # only for a second).
        e = EntryAttributes()
        e.st_ino = InodeT(0)
        if self.tree.watched and not pt.follows_git(parent):
            e.entry_timeout = TIMEOUT
        else:
            e.entry_timeout = GIT_TIMEOUT
        return e

    def _real(self, n: Node) -> bytes:
        assert n.lower is not None
        return self.tree.lower_path(n.lower)

    # ---------------------------------------------------------------- lookups and attributes

    async def lookup(
        self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext
    ) -> EntryAttributes:
        n = self.table.find(parent_inode, name)
        d = self.tree.node(parent_inode)
        ahead = self.ahead
        if (
            ahead is not None
            and name != GIT  # (git's first lookup: with the session's fsmonitor, its only one)
            # Never listed ahead (`_list_ahead`), and most of git's requests: its objects.
            and not pt.follows_git(d)
            and (n is not None or not self._made_here(d))
            and ahead.due(parent_inode)
        ):
            self._list_ahead(ahead, d, for_lookup=True)
        if n is None:
            return self._negative(d)
        entry = self._entry(n, ctx.pid)
        n.lookups += 1  # (`NodeTable.count_lookup`, inline: once per name of a cold status)
        return entry

    @staticmethod
    def _made_here(d: Node) -> bool:
        """Whether directory `d` is the session's own, with no worktree directory below it.
        A name missing there is one being made (`tar -x`, `cp -r`: the kernel looks each up
        before it creates it), and the kernel knows every name made there through the view:
        listing it ahead was 2 READDIRPLUS a file of an untar, and nothing the client used."""
        return d.upper and d.origin is None

    def _list_ahead(self, ahead: ListAhead, d: Node, *, for_lookup: bool = False) -> None:
        # Not below .git (git writes there from both sides, so its entries are kept for a
        # second only), nor a huge directory, of which one name says little.
        if pt.follows_git(d) or not d.is_dir or len(d.entries or ()) > LIST_AHEAD_MAX:
            return
        size = self.tree.lower_size(d)
        if size is None or size <= LIST_AHEAD_MAX_BYTES:
            ahead.note(self.tree.path_of(d), d.ino if for_lookup else None)

    def _stat_ahead(self, ahead: ListAhead, n: Node) -> None:
        # A worktree directory listed to the kernel is mostly read next (`find`, `ls -R` and
        # `git status` descend): its worktree directory is read and its entries lstat'd in a
        # thread of C now, so that the daemon's own listing and lstats of it find them cached
        # instead of waiting for the disk one directory at a time.
        st = n.st
        if st is None or not stat.S_ISDIR(st.st_mode) or st.st_size > LIST_AHEAD_MAX_BYTES:
            return
        if not n.upper and n.lower is not None and not pt.follows_git(n):
            ahead.stat_below(self._real(n))

    async def forget(self, inode_list: Sequence[tuple[InodeT, int]]) -> None:
        forget, nodes, release = self.table.forget, self.table.nodes, self.tree.replaced.release
        for ino, count in inode_list:
            forget(ino, count)
            if ino not in nodes:
                self.git_reads.forget(ino)
                release(ino)

    async def getattr(self, inode: InodeT, ctx: RequestContext) -> EntryAttributes:
        return self._entry(self.tree.node(inode))

    async def setattr(
        self,
        inode: InodeT,
        attr: EntryAttributes,
        fields: SetattrFields,
        fh: FileHandleT | None,
        ctx: RequestContext,
    ) -> EntryAttributes:
        n = self.tree.node(inode)
        self.tree.setattr(
            n,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            size=attr.st_size if fields.update_size else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            by=ctx.pid,
        )
        return self._entry(n)

    async def readlink(self, inode: InodeT, ctx: RequestContext) -> FileNameT:
        return FileNameT(self.tree.readlink(self.tree.node(inode)))

    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        st = os.statvfs(self.tree.root)
        out = StatvfsData()
        out.f_bsize = st.f_bsize
        out.f_frsize = st.f_frsize
        out.f_blocks = st.f_blocks
        out.f_bfree = st.f_bfree
        out.f_bavail = st.f_bavail
        out.f_files = st.f_files
        out.f_ffree = st.f_ffree
        out.f_favail = st.f_favail
        out.f_namemax = st.f_namemax
        return out

    # ---------------------------------------------------------------- creating names

    async def mknod(
        self, parent_inode: InodeT, name: FileNameT, mode: ModeT, rdev: int, ctx: RequestContext
    ) -> EntryAttributes:
        n = self.tree.mknod(
            parent_inode, name, mode & ~ctx.umask, ctx.uid, ctx.gid, rdev, by=ctx.pid
        )
        self._changed_dirs(parent_inode)
        return self._entry(n)

    async def mkdir(
        self, parent_inode: InodeT, name: FileNameT, mode: ModeT, ctx: RequestContext
    ) -> EntryAttributes:
        n = self.tree.mkdir(parent_inode, name, mode & ~ctx.umask, ctx.uid, ctx.gid, by=ctx.pid)
        self._changed_dirs(parent_inode)
        return self._entry(n)

    async def symlink(
        self, parent_inode: InodeT, name: FileNameT, target: FileNameT, ctx: RequestContext
    ) -> EntryAttributes:
        n = self.tree.symlink(parent_inode, name, target, ctx.uid, ctx.gid, by=ctx.pid)
        self._changed_dirs(parent_inode)
        return self._entry(n)

    async def link(
        self, inode: InodeT, new_parent_inode: InodeT, new_name: FileNameT, ctx: RequestContext
    ) -> EntryAttributes:
        n = self.tree.link(inode, new_parent_inode, new_name, by=ctx.pid)
        self._changed_dirs(new_parent_inode)
        return self._entry(n)

    async def create(
        self,
        parent_inode: InodeT,
        name: FileNameT,
        mode: ModeT,
        flags: FlagT,
        ctx: RequestContext,
    ) -> tuple[FileInfo, EntryAttributes]:
        existing = self.tree.find(parent_inode, name)
        if existing is None:
            try:
                made = self.tree.create(
                    parent_inode, name, mode & ~ctx.umask, ctx.uid, ctx.gid, by=ctx.pid
                )
            except FileExistsError:
                # Making the directory the session's own read the worktree's listing anew,
                # and the worktree has the name now (an apply wrote it there meanwhile).
                existing = self.tree.find(parent_inode, name)
                if existing is None:
                    raise
            else:
                self._changed_dirs(parent_inode)
                return self._open_handle(made), self._entry(made)
        # The kernel asked to create a name it believed absent (the worktree grew it
        # meanwhile): O_EXCL fails as on any filesystem, otherwise the file is opened.
        if flags & os.O_EXCL:
            raise FUSEError(errno.EEXIST)
        self.tree.count_lookup(existing)
        return await self._open_node(existing, flags, ctx.pid), self._entry(existing)

    # ---------------------------------------------------------------- removing and renaming

    async def unlink(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        self.tree.unlink(parent_inode, name, by=ctx.pid)
        self._changed_dirs(parent_inode)

    async def rmdir(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        self.tree.rmdir(parent_inode, name, by=ctx.pid)
        self._changed_dirs(parent_inode)

    async def rename(
        self,
        parent_inode_old: InodeT,
        name_old: FileNameT,
        parent_inode_new: InodeT,
        name_new: FileNameT,
        flags: FlagT,
        ctx: RequestContext,
    ) -> None:
        self.tree.rename(
            parent_inode_old,
            name_old,
            parent_inode_new,
            name_new,
            flags,
            ctx.uid,
            ctx.gid,
            by=ctx.pid,
        )
        self._changed_dirs(parent_inode_old, parent_inode_new)

    def _changed_dirs(self, *inodes: int) -> None:
        """Directories this request changed (link count, size, times), told to the kernel
        before the reply while a listing ahead is queued or in flight. The kernel only marks
        their attributes stale, and a GETATTR or READDIRPLUS of a listing thread answered
        before the change but taken in after it put the old ones back, for TIMEOUT (a
        RENAME_EXCHANGE of a directory into `bin` left `bin` at its old link count). Told,
        the kernel counts their attributes anew, and drops any reply asked before. With no
        listing pending, no such reply is in the kernel's hands."""
        ahead = self.ahead
        if ahead is None or ahead.idle:
            return
        for ino in dict.fromkeys(inodes):  # (once each, in order)
            with contextlib.suppress(OSError):  # (not held by the kernel)
                pyfuse3.invalidate_inode(InodeT(ino), attr_only=True)

    # ---------------------------------------------------------------- file data

    async def open(self, inode: InodeT, flags: FlagT, ctx: RequestContext) -> FileInfo:
        raise FUSEError(errno.ENOSYS)

    async def _open_node(self, n: Node, flags: int, pid: int) -> FileInfo:
        if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
            self.tree.truncate(n, 0, by=pid)
        return self._open_handle(n)

    def _open_handle(self, n: Node) -> FileInfo:
        # Only CREATE opens here: requests name the file by its inode (zero-message opens).
        return FileInfo(fh=FileHandleT(n.ino), keep_cache=True)

    async def read(self, fh: FileHandleT, off: int, size: int) -> bytes:
        n = self.tree.node(fh)
        old = self.tree.replaced.read(n.ino, off, size)
        if old is not None:
            return old  # what a rewind replaced, until the kernel dropped it (replaced.py)
        if not n.upper and in_git(n.lower):
            shown = self._shown_index(n)
            if shown is not None:
                return shown[off : off + size]
            return self.git_reads.read(n.ino, self._real(n), off, size)
        fd = self.tree.worktree_fd(n)
        if fd is not None:
            if off == 0 and self.ahead is not None:
                self._read_ahead(self.ahead, n)
            if size >= SPLICE_MIN:
                return FILE_SLICE(fd, off, size)
            # (not `tree.read`, which would look the descriptor up, and check it, again)
            return os.pread(fd, size, off)
        return self.tree.read(n, off, size)

    def _read_ahead(self, ahead: ListAhead, n: Node) -> None:
        parent = self.tree.nodes.get(n.parent)
        rel = None if parent is None else parent.worktree_rel
        if parent is None or rel is None or in_git(rel):
            return
        if ahead.read_due(parent.ino):
            ahead.read_below(self.tree.lower_path(rel))

    async def write(
        self, fh: FileHandleT, off: int, buf: bytes, ctx: RequestContext | None = None
    ) -> int:
        return self.tree.write(self.tree.node(fh), off, buf, by=ctx.pid if ctx is not None else 0)

    async def fallocate(
        self, fh: FileHandleT, mode: int, offset: int, length: int, ctx: RequestContext
    ) -> None:
        self.tree.fallocate(self.tree.node(fh), mode, offset, length, by=ctx.pid)

    async def flush(self, fh: FileHandleT) -> None:
        # Nothing to do on close(2) (data is committed in batches and on fsync); ENOSYS tells
        # the kernel to stop sending FLUSH at all, one request less per open file.
        raise FUSEError(errno.ENOSYS)

    async def release(self, fh: FileHandleT) -> None:
        # Only for a file made by CREATE and closed before any `open` was answered ENOSYS:
        # nothing is held for it.
        return

    async def fsync(self, fh: FileHandleT, datasync: bool) -> None:
        self.tree.save()

    # ---------------------------------------------------------------- directories

    async def opendir(self, inode: InodeT, ctx: RequestContext) -> FileHandleT:
        raise FUSEError(errno.ENOSYS)

    async def readdir(self, fh: FileHandleT, start_id: int, token: ReaddirToken) -> None:
        # `fh` is the directory's inode (see zero-message opens above).
        d = self.tree.node(fh)
        listing = self.listings.get(fh) if start_id else None
        if listing is None:
            if len(self.listings) >= LISTINGS_OPEN:
                self.listings.clear()
            listing = self.listings[fh] = self._listing(d)
        cookies, names = listing
        ahead = self.ahead
        subdirs = SUBDIRS if ahead is not None and ahead.subdirs_due(d.ino) else 0
        # (looked up once per listing, not per name)
        known, find_in, entry = self.table.known, self.table.find_in, self._entry
        name_max = self.lower.name_max
        reply, reply_name = pyfuse3.readdir_reply, pyfuse3.readdir_reply_name
        for index in range(bisect.bisect_right(cookies, start_id), len(names)):
            name = names[index]
            held = known(d, name)
            if held is not None and held.lookups:
                # By name, inode and type alone (patch 0004): the kernel holds this inode
                # already (a `git status` looks up every file before it lists the directories),
                # so no attributes to fetch or send, and no lookup count to take back later.
                if not reply_name(
                    token, FileNameT(name), InodeT(held.ino), ModeT(held.mode), cookies[index]
                ):
                    return
                continue
            if len(name) > name_max:
                continue  # (as `find` refuses it: ENAMETOOLONG)
            try:
                n = find_in(d, name)
            except OSError:
                continue
            if n is None:
                continue
            if ahead is not None:
                self._stat_ahead(ahead, n)
                if subdirs and n.is_dir and ahead.due(n.ino):
                    subdirs -= 1
                    self._list_ahead(ahead, n)
            if not reply(token, FileNameT(name), entry(n), cookies[index]):
                return
            n.lookups += 1  # (`NodeTable.count_lookup`, inline)
        self.listings.pop(fh, None)

    def _listing(self, d: Node) -> tuple[list[int], list[bytes]]:
        # A worktree directory the session never touched lists the worktree's names, whose
        # listing `LowerLayer` keeps while the directory is unchanged: their cookie order is
        # kept with it. Built anew, it was some 0.6 us a name, twice per name of a cold
        # `git status` (each directory's listing is built again for the request that finds
        # its end).
        worktree = None
        if not d.upper and not d.sealed and d.lower is not None and d.is_dir:
            worktree = self.lower.listing(d.lower)
            kept = self.cookie_orders.get(d.ino)
            if kept is not None and kept[0] is worktree:
                return kept[1]
            names = (name for name, _ in worktree)
        else:
            names = (name for name, _ in self.table.children(d))
        ordered = sorted(((hash(name) & COOKIE_MASK) or 1, name) for name in names)
        listing = [c for c, _ in ordered], [name for _, name in ordered]
        if worktree is not None:
            if len(self.cookie_orders) >= LISTINGS_KEPT:
                self.cookie_orders.clear()
            self.cookie_orders[d.ino] = (worktree, listing)
        return listing

    async def releasedir(self, fh: FileHandleT) -> None:
        self.listings.pop(fh, None)

    async def fsyncdir(self, fh: FileHandleT, datasync: bool) -> None:
        self.tree.save()

    # ---------------------------------------------------------------- extended attributes

    async def setxattr(
        self, inode: InodeT, name: XAttrNameT, value: bytes, ctx: RequestContext
    ) -> None:
        n = self.tree.node(inode)
        self.tree.setxattr(n, name, value, by=ctx.pid)
        self._mode_changed_by(n, name)

    async def getxattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> bytes:
        return self.tree.getxattr(self.tree.node(inode), name)

    async def listxattr(self, inode: InodeT, ctx: RequestContext) -> Sequence[XAttrNameT]:
        return [XAttrNameT(x) for x in self.tree.listxattr(self.tree.node(inode))]

    async def removexattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> None:
        n = self.tree.node(inode)
        self.tree.removexattr(n, name, by=ctx.pid)
        self._mode_changed_by(n, name)

    @staticmethod
    def _mode_changed_by(n: Node, name: bytes) -> None:
        """An access ACL gives the mode (see acl.py), but no reply to an xattr call carries
        attributes: the kernel would keep the ones it cached (0600 from `sed -i`'s temporary
        file) for the attribute timeout. Only the attributes are dropped, which takes no lock
        a request in flight may hold, so it is safe here."""
        if name == acl.ACCESS:
            with contextlib.suppress(OSError):
                pyfuse3.invalidate_inode(InodeT(n.ino), attr_only=True)
