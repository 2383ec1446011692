"""The lower watch (of the real worktree), as a process of its own:
`python -m gitsess.overlay.lower_watch_process ROOT`.

Writes every batch of changed paths (relative to ROOT) to stdout, each path ended by a NUL and
the batch by one more, after an empty batch once the watch is in place; exits when its stdin
closes (the daemon stopped or died). Each byte read on stdin asks for a sync: every change made
before it is reported at once, in a batch of its own, then `SYNCED` (a name no relative path
can be) follows. The kernel queues an inotify event before the call that made the change
returns, so whatever the queue holds when the request is read covers every change made before
the request was sent: git's fsmonitor answers wait for this, as Watchman's wait for a cookie
file (a file of ours written in the worktree would show in its `git status`).

A process, not a thread of the daemon: setting up a recursive watch walks the whole tree
(about 0.1 s on 50,000 files), which would hold the daemon's GIL and stall the filesystem's
requests.

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
import os
import select
import struct
import sys
import time
from collections.abc import Callable, Iterator

from gitsess.libc import LIBC, check
from gitsess.overlay import longpath

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

# What follows a sync's batch on stdout (see the module's text).
SYNCED = b"/"

_NO_WATCHES = "out of inotify watches (raise fs.inotify.max_user_watches)"


def _join(parent: bytes, name: bytes) -> bytes:
    return parent + b"/" + name if parent else name


def _is_git(parent: bytes, name: bytes) -> bool:
    return not parent and name == b".git"


class Watch:
    """One inotify watch per directory below `root`, except the top-level `.git`."""

    def __init__(self, root: bytes, on_change: OnChange, on_synced: Callable[[int], None]) -> None:
        self.root = root
        self.on_change = on_change
        self.on_synced = on_synced
        self.fd = check(LIBC.inotify_init1(IN_CLOEXEC))
        self._dirs: dict[int, bytes] = {}  # watch descriptor -> directory (relative to root)
        self._wds: dict[bytes, int] = {}

    def start(self) -> None:
        """Returns once every directory is watched: changes from then on are all reported."""
        for _ in self._add_tree(b""):
            pass

    def close(self) -> None:
        os.close(self.fd)

    def serve(self, stop_fd: int) -> None:
        """Reports changes in batches until `stop_fd` is at its end; each byte read from it
        asks for a sync."""
        pending: set[bytes] = set()
        opened = 0.0
        while True:
            timeout = None
            if pending:
                timeout = max(0.0, min(SETTLE_S, opened + BATCH_MAX_S - time.monotonic()))
            ready, _, _ = select.select([self.fd, stop_fd], [], [], timeout)
            if stop_fd in ready:
                asked = len(os.read(stop_fd, 4096))
                if not asked:
                    return
                while select.select([self.fd], [], [], 0)[0]:
                    pending |= self._read()
                if pending:
                    self.on_change(pending)
                    pending = set()
                self.on_synced(asked)
                continue
            if self.fd in ready:
                if not pending:
                    opened = time.monotonic()
                pending |= self._read()
            if pending and (self.fd not in ready or time.monotonic() - opened >= BATCH_MAX_S):
                self.on_change(pending)
                pending = set()

    def _read(self) -> set[bytes]:
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


def main() -> None:
    root = os.fsencode(sys.argv[1])
    out = sys.stdout.buffer

    def report(rels: set[bytes]) -> None:
        out.write(b"".join(rel + b"\0" for rel in rels) + b"\0")
        out.flush()

    def synced(count: int) -> None:
        out.write((SYNCED + b"\0") * count)
        out.flush()

    watch = Watch(root, report, synced)
    try:
        try:
            watch.start()
        except OSError as e:
            # Never in place: the daemon keeps answering with 1 s timeouts, slower but correct.
            sys.exit(f"gitsess watch: {_reason(e)}; the view re-checks the worktree every second")
        out.write(b"\0")  # an empty batch: every watch is in place
        out.flush()
        try:
            watch.serve(sys.stdin.fileno())
        except OSError as e:
            # A directory made later could not be watched: the daemon starts a new watch.
            sys.exit(f"gitsess watch: {_reason(e)}")
    finally:
        watch.close()


def _reason(e: OSError) -> str:
    return _NO_WATCHES if e.errno == errno.ENOSPC else str(e.strerror)


if __name__ == "__main__":
    main()
