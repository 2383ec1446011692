"""File contents and metadata of the merged view: copy-up, reads and writes (inline or in a
data file), setattr, truncate, fallocate, extended attributes.

Copy-up gives a lower node a row (and its parents, as merged directories); data is copied
(`sendfile` from the worktree's file) only on the first data change, not at all for `O_TRUNC`
or a truncate to 0. Renaming or hard-linking a lower file copies its data, so the session's file
no longer changes with the worktree's. A file with `data = 0` reads from its origin, `1` from
its data file `<session>/data/<ino>`, `2` from a row of `inline_data` (up to `INLINE_MAX`; one
that grows past it moves to a data file for good).

Data is written at once with `pwrite` (up to 64 data files kept open); a short write takes back
what it added past the end and answers `ENOSPC`. A durable commit first `fdatasync`s every data
file written since the last. fallocate takes the modes ext4 does, on the data file, to which an
inline or worktree file's bytes move first.

In the object store below `.git`, a metadata change copies the bytes too (`_own_metadata`: real
git may remove the lower file later, repacking), and a times-only change of a real pack (git
freshening a packed object) is `EPERM`, so git writes that object loose into the session.

A node a live rewind removes keeps its old content while the kernel holds it (`keep_content`):
it reads whole as it was, as an open unlinked file does, and refuses writes.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterable

from gitsess import libc
from gitsess.overlay import acl, longpath
from gitsess.overlay.delta import INLINE
from gitsess.overlay.fdcache import same_file
from gitsess.overlay.gitdir import in_git, object_store
from gitsess.overlay.nodes import Node, err, stamp
from gitsess.overlay.tree_lookup import LookupTree

# fallocate(2) modes served (those the kernel passes on to a FUSE filesystem)
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
# Files up to this size keep their bytes in delta.db (see store.INLINE), committed with their
# metadata; a file that grows past it moves to a data file for good.
INLINE_MAX = 16 * 1024


class DataTree(LookupTree):
    # ---------------------------------------------------------------- copy-up

    def make_upper(self, n: Node) -> None:
        """Give a lower node a row of its own (metadata only; data stays in the lower file)."""
        if n.upper:
            return
        if n.sealed:
            raise err(errno.EACCES)
        parent = self.node(n.parent)
        self.make_upper(parent)
        assert n.lower is not None
        st = self._lower_stat(n.lower)
        if st is None:
            raise err(errno.ENOENT)
        named = n.nlink != 0
        self._fill_from_stat(n, st)
        n.upper = True
        n.origin = n.lower
        n.origin_stamp = stamp(st)
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

    def _own_metadata(self, n: Node) -> None:
        """Copy up a node whose metadata the session changes. A file of the real object store
        is copied with its bytes: git in the real repository removes such files (a loose object
        packed, an old pack repacked), and the session's copy must not lose its content then."""
        if not n.upper and stat.S_ISREG(n.mode) and object_store(n.lower) is not None:
            self.ensure_data(n)
        else:
            self.make_upper(n)

    def ensure_data(self, n: Node, *, keep: int | None = None) -> None:
        """Copy a file's bytes into its data file on its first data change.

        `keep` bounds how much of the lower file matters (0 for O_TRUNC: nothing is copied).
        """
        if n.ino in self._kept:
            raise err(errno.ESTALE)  # a file a rewind removed (see `keep_content`)
        self.replaced.told(n.ino)  # (a file a rewind changed: what it had is no longer read)
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
        """The open data file of `n`, created empty if it has none yet; saved first when a
        checkpoint needs it as it is."""
        self.store.keep_data(n.ino)
        fd = self._open_data(n, create=True)
        assert fd is not None
        return fd

    # ---------------------------------------------------------------- entries and writability

    def _set_entry(self, parent: Node, name: bytes, ino: int) -> None:
        assert parent.entries is not None
        parent.entries[name] = ino
        if ino and self.nodes[ino].is_dir:
            parent.subdirs = None
        self._pending.dentries[(parent.ino, name)] = ino
        if ino == 0:
            parent.quiet_since = time.monotonic_ns()

    def _check_writable(self) -> None:
        if self.readonly:
            raise err(errno.EROFS)

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
                raise err(errno.EISDIR)
            self.truncate(n, size)
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
        self._pending.nodes.add(n.ino)

    def truncate(self, n: Node, size: int) -> None:
        self._check_writable()
        if not stat.S_ISREG(n.mode):
            raise err(errno.EINVAL)
        self.ensure_data(n, keep=size)
        if n.data == INLINE and size > INLINE_MAX:
            self._to_data_file(n)
        if n.data == INLINE:
            content = self._inline(n)
            if len(content) > size:
                self._pending.inline[n.ino] = content[:size]
        else:
            self.store.keep_data(n.ino)
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
            raise err(errno.EOPNOTSUPP)
        if offset < 0 or length <= 0:
            raise err(errno.EINVAL)
        if not stat.S_ISREG(n.mode):
            raise err(errno.EISDIR if n.is_dir else errno.ENODEV)
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
            raise err(errno.ENOSPC)
        self._unsynced.add(n.ino)
        self._write_behind.wrote(n.ino, fd, written)
        return self._written(n, off, written)

    def _written(self, n: Node, off: int, written: int) -> int:
        n.size = max(n.size, off + written)
        n.mtime_ns = n.ctime_ns = time.time_ns()
        self._pending.nodes.add(n.ino)
        return written

    def keep_content(self, inodes: Iterable[int]) -> list[int]:
        """Before a rewind that removes these nodes: the content of those the kernel holds,
        so that each reads whole as it was, as an open unlinked file does, until the kernel
        forgets it. Until its invalidation a process may still reach it by a name it looked up
        before. A descriptor opened now keeps the old bytes: the rewind renames data files.
        Returns the nodes it kept content of (for `let_go`, should the rewind not happen)."""
        kept = []
        for ino in inodes:
            n = self.nodes.get(ino)
            if n is None or not (n.lookups or n.opens) or not stat.S_ISREG(n.mode):
                continue
            if not n.upper or n.origin is not None or not n.data or ino in self._kept:
                continue
            if n.data == INLINE:
                self._kept[ino] = self._inline(n)
            else:
                try:
                    self._kept[ino] = os.open(self.store.data_path(ino), os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    self._kept[ino] = b""  # no data file: it reads as zeros, as it did
            kept.append(ino)
        return kept

    def hold_replaced(self, inodes: Iterable[int]) -> list[int]:
        """Before a rewind that changes these nodes in place: the content of the files the
        kernel holds, which reads answer until the kernel has their new attributes (see
        overlay/replaced.py). Returns the nodes held (for `replaced.told`, should the rewind
        not happen)."""
        held = []
        for ino in inodes:
            n = self.nodes.get(ino)
            if n is None or not (n.lookups or n.opens) or not stat.S_ISREG(n.mode):
                continue
            if ino in self._kept or ino in self.replaced:
                continue  # (removed by the rewind; or held since an earlier one, still unread)
            content: bytes | int
            if n.upper and n.data == INLINE:
                content, size = self._inline(n), n.size
            elif n.upper and n.data:
                try:
                    content = os.open(self.store.data_path(ino), os.O_RDONLY | os.O_CLOEXEC)
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
                        os.open, self.lower_path(rel), os.O_RDONLY | os.O_CLOEXEC
                    )
                except OSError:
                    continue  # gone from the worktree (or out of descriptors): not kept
                size = n.size if n.upper else os.fstat(content).st_size
            self.replaced.hold(ino, size, content)
            held.append(ino)
        return held

    def _inline(self, n: Node) -> bytes:
        """An inline file's bytes (up to its size; any shorter, the rest reads as zeros)."""
        if n.ino in self._pending.inline:
            return self._pending.inline[n.ino] or b""
        if not n.size:
            return b""  # a file just made, say: no query of delta.db for its first write
        kept = self._kept.get(n.ino)
        return kept if isinstance(kept, bytes) else self.store.inline(n.ino)

    def _to_data_file(self, n: Node) -> None:
        """Move an inline file that grows past INLINE_MAX into a data file."""
        content = self._inline(n)
        fd = self._data_fd(n)
        os.ftruncate(fd, 0)
        if os.pwrite(fd, content, 0) < len(content):
            os.ftruncate(fd, 0)
            raise err(errno.ENOSPC)
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

    def opened(self, n: Node) -> None:
        n.opens += 1

    def released(self, n: Node) -> None:
        n.opens -= 1
        self._maybe_drop(n)

    def readlink(self, n: Node) -> bytes:
        if n.upper:
            if n.target is None:
                raise err(errno.EINVAL)
            return n.target
        assert n.lower is not None
        try:
            return longpath.call(os.readlink, self.lower_path(n.lower))
        except OSError as e:
            raise err(e.errno or errno.EIO) from None

    # ---------------------------------------------------------------- extended attributes

    def getxattr(self, n: Node, name: bytes) -> bytes:
        table = self._xattr_table(n)
        if name not in table:
            raise err(errno.ENODATA)
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
        self._own_metadata(n)
        if n.xattrs is None:
            n.xattrs = {}
        n.xattrs[name] = value
        n.ctime_ns = time.time_ns()
        self._pending.xattrs[(n.ino, name)] = value
        self._pending.nodes.add(n.ino)

    def removexattr(self, n: Node, name: bytes) -> None:
        self._check_writable()
        if name not in self._xattr_table(n):
            raise err(errno.ENODATA)
        self._own_metadata(n)
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


def _names(path: bytes, fd: int) -> bool:
    """Whether `path` still names the file open as `fd` (not when it names none)."""
    try:
        return longpath.call(same_file, path, fd)
    except OSError:
        return False


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
