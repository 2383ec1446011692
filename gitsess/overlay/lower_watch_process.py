"""The lower watch (of the real worktree), as a process of its own, one for every session
of a worktree: `python -m gitsess.overlay.lower_watch_process ROOT`.

It serves the daemons of the sessions over ROOT (this user's, in this mount namespace) on an
abstract unix socket named after them (`address`): binding the name is the lock, and a second
one started for the same worktree exits at once, its starter connecting to the first. A daemon
connects (`lower_watcher.LowerWatcher`, which starts the process when no one serves the name)
and reads every batch of changed paths (relative to ROOT), each path ended by a NUL and the
batch by one more, after an empty batch once the watch is in place (`FAILED` instead when it
cannot be: no inotify watches left). Each byte a daemon sends asks for a sync: every change
made before it is reported at once, in a batch of its own, then `SYNCED` (a name no relative
path can be) to that daemon. The kernel queues an inotify event before the call that made the
change returns, so whatever the queue holds when the request is read covers every change made
before the request was sent: git's fsmonitor answers wait for this, as Watchman's wait for a
cookie file (a file of ours written in the worktree would show in its `git status`). With no
daemon left for `LINGER_S`, the process exits.

A sync is a round trip through this process, some 0.5 ms of a commit inside on a loaded
machine; most find nothing changed. So a daemon can tell that without asking (`Reads`): the
"in place" byte brings it the inotify descriptor and a shared counter of this process's reads
of it, bumped before each read; after each batch and before each `SYNCED` comes `TAG` and the
count so far (every read before it is reported). Its inotify queue empty, then the counter at
the last tag the daemon handled: every change made before was reported and handled.

One per worktree, not per session: fifty sessions of one worktree had fifty watches of it, of
5 MiB each, every one woken by every change. A process, not a thread of a daemon: setting up a
recursive watch walks the whole tree (about 0.1 s on 50,000 files), which would hold the
daemon's GIL and stall the filesystem's requests.

The watch is inotify, one watch per directory, with a mask of our own: changes only. watchfiles
(notify) also asks for IN_OPEN and IN_CLOSE_NOWRITE and cannot be told otherwise, so every
open of every worktree file, by anyone (the daemon's own opens included), queued two events and
woke this process: natively, reading the 5,000 files of the benchmark's corpus took 73 ms with
such a watch against 48 ms without.

The watch excludes the worktree's `.git` directory: the state directory, and every session's
mount point with it, lives there, and a recursive watch would walk into mounted views.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator

from gitsess.libc import LIBC, check
from gitsess.overlay import control, longpath

OnChange = Callable[[set[bytes]], None]

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
_EVENT = struct.Struct("=iIII")  # wd, mask, cookie, len; then the name, NUL-padded
# How long a batch stays open for more events once the first came: a tool's burst of changes
# (a checkout, an unpack) goes out as one batch; but never longer than BATCH_MAX_S, so a file
# written without pause is still reported while it is written.
SETTLE_S = 0.03
BATCH_MAX_S = 0.1

# What follows a sync's batch, and what a daemon gets instead of "in place" when the watch
# cannot be set up (see the module's text): names no relative path can be.
SYNCED = b"/"
FAILED = b"//"
TAG = b"/#"  # and the count of reads, in decimal
# How long the process stays with no daemon connected (the first one connects right after
# starting it; a daemon whose watch was lost connects again at once).
LINGER_S = 2.0
# What a daemon that reads too slowly may have waiting for it before it is let go (it then
# connects again, and asks the kernel to forget everything, as after any lost watch).
MAX_QUEUED = 64 << 20

_NO_WATCHES = "out of inotify watches (raise fs.inotify.max_user_watches)"


def _join(parent: bytes, name: bytes) -> bytes:
    return parent + b"/" + name if parent else name


def _is_git(parent: bytes, name: bytes) -> bool:
    return not parent and name == b".git"


class Reads:
    """A count of the watch's reads of its inotify queue, in memory shared with the daemons
    (`fd`, a memfd they map): bumped before each read, so that once the queue is empty, a
    change made before then was read by a read already counted."""

    SIZE = 8

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, self.SIZE)

    @classmethod
    def create(cls) -> Reads:
        fd = os.memfd_create("gitsess-watch-reads", os.MFD_CLOEXEC)
        os.ftruncate(fd, cls.SIZE)
        return cls(fd)

    def bump(self) -> None:
        self._map[:] = (self.count() + 1).to_bytes(self.SIZE, sys.byteorder)

    def count(self) -> int:
        return int.from_bytes(self._map[:], sys.byteorder)

    def tag(self) -> bytes:
        return TAG + b"%d\0" % self.count()

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


class Watch:
    """One inotify watch per directory below `root`, except the top-level `.git`."""

    def __init__(self, root: bytes, on_change: OnChange) -> None:
        self.root = root
        self.on_change = on_change
        self.fd = check(LIBC.inotify_init1(IN_CLOEXEC))
        self.reads = Reads.create()
        self._dirs: dict[int, bytes] = {}  # watch descriptor -> directory (relative to root)
        self._wds: dict[bytes, int] = {}

    def start(self) -> None:
        """Returns once every directory is watched: changes from then on are all reported."""
        for _ in self._add_tree(b""):
            pass

    def close(self) -> None:
        os.close(self.fd)
        self.reads.close()

    def serve(self, daemons: Daemons) -> None:
        """Reports changes in batches, and answers syncs, until no daemon was connected for
        `LINGER_S`."""
        pending: set[bytes] = set()
        opened = 0.0
        alone_since = time.monotonic()
        while True:
            if daemons.conns:
                alone_since = time.monotonic()
            elif time.monotonic() - alone_since > LINGER_S:
                return
            timeout = LINGER_S
            if pending:
                timeout = max(0.0, min(SETTLE_S, opened + BATCH_MAX_S - time.monotonic()))
            ready, writable, _ = select.select(
                [self.fd, *daemons.readable()], daemons.writers(), [], timeout
            )
            for fd in writable:
                daemons.flush(fd)
            asked = daemons.take(ready)
            if asked:
                while select.select([self.fd], [], [], 0)[0]:
                    pending |= self._read()
                if pending:
                    self.on_change(pending)
                    pending = set()
                for fd, count in asked.items():
                    daemons.send(fd, self.reads.tag() + (SYNCED + b"\0") * count)
                continue
            if self.fd in ready:
                if not pending:
                    opened = time.monotonic()
                pending |= self._read()
            if pending and (self.fd not in ready or time.monotonic() - opened >= BATCH_MAX_S):
                self.on_change(pending)
                pending = set()

    def _read(self) -> set[bytes]:
        self.reads.bump()
        data = os.read(self.fd, 256 * 1024)
        changed: set[bytes] = set()
        at = 0
        while at < len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            changed |= self._event(wd, mask, name)
        return changed

    def _event(self, wd: int, mask: int, name: bytes) -> set[bytes]:
        if mask & IN_Q_OVERFLOW:
            # Events were lost: every directory may have changed (the root's entries name it).
            return {rel for rel in self._wds if rel}
        if mask & IN_IGNORED:
            self._forget(wd)
            return set()
        parent = self._dirs.get(wd)
        if parent is None:
            return set()
        if not name:
            # The directory itself (IN_DELETE_SELF, IN_MOVE_SELF, IN_ATTRIB): its parent's
            # event names it too, but a moved root-level directory has no other witness.
            return {parent} if parent else set()
        if _is_git(parent, name):
            return set()
        rel = _join(parent, name)
        changed = {rel}
        if mask & IN_ISDIR:
            # A removed directory's watch goes by itself (IN_IGNORED); a moved one keeps its
            # watches, and theirs, under names that are no longer right.
            if mask & IN_MOVED_FROM:
                self._forget_tree(rel)
            if mask & (IN_CREATE | IN_MOVED_TO):
                # Whatever was made in it before its watch was in place is reported with it.
                changed.update(self._add_tree(rel))
        return changed

    def _add_tree(self, top: bytes) -> Iterator[bytes]:
        """Watches `top` and every directory below it; yields every path found below it."""
        stack = [top]
        while stack:
            rel = stack.pop()
            path = _join(self.root, rel) if rel else self.root
            try:
                # The root may be reached through a symlink; nothing below it is followed.
                mask = MASK if rel else MASK & ~IN_DONT_FOLLOW
                wd = longpath.call(self._add_watch, path, mask)
            except OSError as e:
                if rel and e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    continue  # gone meanwhile, or not ours to watch
                raise
            self._dirs[wd] = rel
            self._wds[rel] = wd
            try:
                entries = longpath.entries(path)
            except OSError:
                continue
            for name, is_dir in entries:
                if _is_git(rel, name):
                    continue
                child = _join(rel, name)
                yield child
                if is_dir:
                    stack.append(child)

    def _add_watch(self, path: bytes, mask: int) -> int:
        return check(LIBC.inotify_add_watch(self.fd, path, mask))

    def _forget_tree(self, top: bytes) -> None:
        """A directory moved: its watches would name the old paths."""
        below = top + b"/"
        for rel in [r for r in self._wds if r == top or r.startswith(below)]:
            wd = self._wds.pop(rel)
            self._dirs.pop(wd, None)
            LIBC.inotify_rm_watch(self.fd, wd)

    def _forget(self, wd: int) -> None:
        rel = self._dirs.pop(wd, None)
        if rel is not None and self._wds.get(rel) == wd:
            del self._wds[rel]


class Daemons:
    """The daemons connected to the watch, and what each has yet to read."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.conns: dict[int, socket.socket] = {}
        self._out: dict[int, bytearray] = {}
        # What each daemon gets with "in place", and the tag after each batch (`Reads`).
        self.watch: Watch | None = None

    def readable(self) -> list[int]:
        return [self.listener.fileno(), *self.conns]

    def writers(self) -> list[int]:
        return [fd for fd, out in self._out.items() if out]

    def take(self, ready: list[int]) -> dict[int, int]:
        """Accept who connected (each told at once the watch is in place), read what those
        that sent something sent: how many syncs each asked for."""
        if self.listener.fileno() in ready:
            self._accept()
        asked = {}
        for fd in [fd for fd in ready if fd in self.conns]:
            try:
                data = self.conns[fd].recv(4096)
            except OSError:
                data = b""
            if data:
                asked[fd] = len(data)
            else:
                self._drop(fd)
        return asked

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        if not control.trusted(control.peer_uid(conn)):
            conn.close()  # another user's: nothing of this worktree is told to it
            return
        watch = self.watch
        try:
            # An empty batch: the watch is in place; with it, what spares the daemon syncs.
            fds = [] if watch is None else [watch.fd, watch.reads.fd]
            socket.send_fds(conn, [b"\0"], fds)
        except OSError:
            conn.close()
            return
        conn.setblocking(False)
        self.conns[conn.fileno()] = conn
        self._out[conn.fileno()] = bytearray()

    def report(self, rels: set[bytes]) -> None:
        batch = b"".join(rel + b"\0" for rel in rels) + b"\0"
        if self.watch is not None:
            batch += self.watch.reads.tag()
        for fd in list(self.conns):
            self.send(fd, batch)

    def send(self, fd: int, data: bytes) -> None:
        out = self._out.get(fd)
        if out is None:
            return
        out += data
        if len(out) > MAX_QUEUED:
            self._drop(fd)
        else:
            self.flush(fd)

    def flush(self, fd: int) -> None:
        out = self._out.get(fd)
        if not out:
            return
        try:
            sent = self.conns[fd].send(out)
        except BlockingIOError:
            return
        except OSError:
            self._drop(fd)
            return
        del out[:sent]

    def fail(self) -> None:
        """The watch cannot be set up: everyone who connected meanwhile is told so."""
        self.listener.setblocking(False)
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                if control.trusted(control.peer_uid(conn)):
                    conn.setblocking(True)
                    conn.sendall(FAILED + b"\0")

    def _drop(self, fd: int) -> None:
        self._out.pop(fd, None)
        conn = self.conns.pop(fd, None)
        if conn is not None:
            conn.close()


def address(root: bytes) -> bytes:
    """The name of the watch of `root`: this user's, in this mount namespace."""
    try:
        namespace = os.readlink("/proc/self/ns/mnt").encode()
    except OSError:
        namespace = b""
    key = b"\0".join([str(os.geteuid()).encode(), os.path.realpath(root), namespace])
    return b"\0gitsess-watch-" + hashlib.sha256(key).hexdigest()[:32].encode()


def main() -> None:
    root = os.fsencode(sys.argv[1])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(root))
    except OSError:
        return  # another process watches this worktree: its starter connects to it
    listener.listen(64)
    daemons = Daemons(listener)
    watch = Watch(root, daemons.report)
    daemons.watch = watch
    try:
        try:
            watch.start()
        except OSError as e:
            # Never in place: the daemons keep answering with 1 s timeouts, slower but correct.
            daemons.fail()
            sys.exit(f"gitsess watch: {_reason(e)}; the view re-checks the worktree every second")
        try:
            watch.serve(daemons)
        except OSError as e:
            # A directory made later could not be watched: the daemons start a new watch.
            sys.exit(f"gitsess watch: {_reason(e)}")
    finally:
        watch.close()


def _reason(e: OSError) -> str:
    return _NO_WATCHES if e.errno == errno.ENOSPC else str(e.strerror)


if __name__ == "__main__":
    main()
