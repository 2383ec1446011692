"""Listing a directory of the view ahead of the lookups that will ask for its entries.

A client that looks up one name in a directory the kernel knows nothing of mostly goes on to
the others (`git status` lstats every tracked file, a test runner imports module after module,
`ls -l`), and each of those names costs a LOOKUP request, a round trip through the daemon. One
READDIRPLUS answers for a whole directory instead: the kernel links a dentry, with its
attributes, for every entry it lists, and keeps the listing itself (see fs.py's zero-message
opens) for the client's own readdir later. So a lookup in a directory hands that directory to a
thread of the daemon's own, which lists it through the mount: the kernel asks the daemon,
between the client's requests, and the client's next lookups there are answered from the
kernel's caches.

The kernel serves requests in the order they come, so a listing waits behind the lookups
already queued; a client with many threads (git's index preload runs up to 20) is ahead of a
single lister in many directories at once, hence several listing threads. They are threads of
C (gitsess/overlay/_lister.c) that never take the GIL: listing threads of Python contended for
it with the thread serving requests, which lost more than the listings won (docs/PERFORMANCE.md,
item 10). What they read is thrown away (the kernel's caches are the point), and a listing
that fails (the directory went, the view was unmounted) is dropped. A listing leaves the
kernel's atime of the directory stale, so a thread stats the directory after listing it: the
client's next stat of it (glibc's `opendir` makes one) is then answered by the kernel, not by
a GETATTR it waits for.

A listing asked for by a lookup also lists the directory's subdirectories ahead (up to
SUBDIRS of them), once, when the daemon serves it: a client that looks up names one by one
mostly goes on into the subdirectories (`git status` lstats the index's paths in order, a cold
`lstat` of a tree walks it), and without it the first name it looked up in each subdirectory
cost a LOOKUP and a listing queued behind it. Only one level: the subdirectories' own
listings list nothing further.

The same threads also read ahead in the worktree itself (`stat_below`): each worktree directory
the daemon lists to the kernel is mostly read next (`find`, `ls -R` and `git status` descend),
so its directory and the lstat of every entry in it are read in a thread while the client is
still at its parent, and the daemon's own listing and lstats of it find the worktree's caches
warm instead of waiting for the disk one directory at a time.

The threads also start the disk on a worktree directory's files (`read_below`) once a second
of them is read from its start with no page of it in the kernel: a client that reads one file
of a directory after another (`grep -r`, a test run's imports, a build) then finds the next
ones in the worktree's page cache. The daemon answers its READs one at a time and a READ
waits for the disk, so without that a cold read of many small files took the disk's latency
once per file on top of the request's round trip.

A listing in flight holds its directory's lock in the kernel until the daemon answers. So
before the daemon stops serving, it stops the listings and lets those in flight finish
(`stop`, `idle`): otherwise its lower watch, invalidating that directory, would wait for the
lock, and the daemon, stopping the watch, for it.

A listing's READDIRPLUS and its thread's `fstat` may be answered before a request changes a
directory and taken in by the kernel after it, which only marks the directory's attributes
stale: the old ones came back for 300 s. So while a listing is pending, the requests that
change directories tell the kernel before they answer (fs.py, `_changed_dirs`).
"""

from __future__ import annotations

import math
import os
import time

from gitsess.overlay import _lister

# Threads listing directories at once.
THREADS = 8
# A directory is listed ahead again only after this many seconds: the lookups in it that come
# before the listing's reply must not queue it again.
AGAIN = 1.0
# Directories remembered with the time of their last listing, at most (then all forgotten).
KEPT = 4096
# Subdirectories listed ahead with a directory a lookup had listed, at most.
SUBDIRS = 64


class ListAhead:
    """Lists directories of the view mounted at `mountpoint` in threads of C (one set per
    process: `stop` is for good)."""

    def __init__(self, mountpoint: str) -> None:
        self._root = os.fsencode(mountpoint)
        self._listed: dict[int, float] = {}
        # Directories listed for a lookup, whose subdirectories their listing is to list too.
        self._parents: set[int] = set()
        # Directories with a file read from its start: how many (up to 2), and when the
        # directory's files were last read ahead.
        self._reads: dict[int, tuple[int, float]] = {}

    def due(self, ino: int) -> bool:
        """Whether directory `ino` is to be listed now; if so, it counts as listed."""
        now = time.monotonic()
        if now - self._listed.get(ino, -math.inf) < AGAIN:
            return False
        if len(self._listed) >= KEPT:
            self._listed.clear()
        self._listed[ino] = now
        return True

    def note(self, path: bytes, ino: int | None = None) -> None:
        """List the directory at `path` in the view (b"" for its root) soon; with its `ino`,
        for a lookup: its listing lists its subdirectories ahead too (`subdirs_due`)."""
        if ino is not None:
            if len(self._parents) >= KEPT:
                self._parents.clear()
            self._parents.add(ino)
        _lister.list_ahead(self._root + b"/" + path if path else self._root, THREADS)

    def subdirs_due(self, ino: int) -> bool:
        """Whether the listing of directory `ino` being served is to list its subdirectories
        ahead (once: it was noted for a lookup)."""
        if ino not in self._parents:
            return False
        self._parents.discard(ino)
        return True

    @staticmethod
    def stat_below(path: bytes) -> None:
        """Read the worktree's directory at `path` (absolute) and lstat its entries soon, in
        the same threads, for the worktree filesystem's caches."""
        _lister.stat_ahead(path, THREADS)

    def read_due(self, ino: int) -> bool:
        """A file of directory `ino` is read from its start, none of it in the kernel: whether
        to read the directory's files ahead now (at the second such file, then at most every
        AGAIN seconds)."""
        now = time.monotonic()
        reads, at = self._reads.get(ino, (0, -math.inf))
        if reads and now - at < AGAIN:
            return False
        if len(self._reads) >= KEPT:
            self._reads.clear()
        if not reads:
            self._reads[ino] = (1, -math.inf)
            return False
        self._reads[ino] = (2, now)
        return True

    @staticmethod
    def read_below(path: bytes) -> None:
        """Start the disk on the files of the worktree's directory at `path` (absolute) soon,
        in the same threads, for the worktree filesystem's page cache."""
        _lister.read_ahead(path, THREADS)

    @staticmethod
    def stop() -> None:
        """Start no listing from now on."""
        _lister.stop()

    @property
    def idle(self) -> bool:
        """Whether no listing is queued or in flight."""
        return _lister.pending() == 0
