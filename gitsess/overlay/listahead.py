"""Listing a directory of the view ahead of the lookups that will ask for its entries.

A client that looks up one name in a directory the kernel knows nothing of mostly goes on to
the others (`git status` lstats every tracked file, a test runner imports module after module,
`ls -l`), and each of those names costs a LOOKUP request, a round trip through the daemon. One
READDIRPLUS answers for a whole directory instead: the kernel links a dentry, with its
attributes, for every entry it lists, and keeps the listing itself (see fs.INODE_FH) for the
client's own readdir later. So a lookup in a directory hands that directory to a thread of the
daemon's own, which lists it through the mount: the kernel asks the daemon, between the
client's requests, and the client's next lookups there are answered from the kernel's caches.

The kernel serves requests in the order they come, so a listing waits behind the lookups
already queued; a client with many threads (git's index preload runs up to 20) is ahead of a
single lister in many directories at once, hence several listing threads. What they read is
thrown away (the kernel's caches are the point), and a listing that fails (the directory went,
the view was unmounted) is dropped.

A listing in flight holds its directory's lock in the kernel until the daemon answers. So
before the daemon stops serving, it stops the listings and lets those in flight finish
(`stop`, `idle`): otherwise its worktree watch, invalidating that directory, would wait for the
lock, and the daemon, stopping the watch, for it.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import threading
import time

# Threads listing directories at once.
THREADS = 8
# A directory is listed ahead again only after this many seconds: the lookups in it that come
# before the listing's reply must not queue it again.
AGAIN = 1.0
# Directories remembered with the time of their last listing, at most (then all forgotten).
KEPT = 4096


class ListAhead:
    """Lists directories of the view mounted at `mountpoint` in threads of its own."""

    def __init__(self, mountpoint: str) -> None:
        self._root = os.fsencode(mountpoint)
        self._dirs: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._listed: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stopped = False
        self._busy = 0

    def due(self, ino: int) -> bool:
        """Whether directory `ino` is to be listed now; if so, it counts as listed."""
        now = time.monotonic()
        if now - self._listed.get(ino, -math.inf) < AGAIN:
            return False
        if len(self._listed) >= KEPT:
            self._listed.clear()
        self._listed[ino] = now
        return True

    def note(self, path: bytes) -> None:
        """List the directory at `path` in the view (b"" for its root) soon."""
        if self._stopped:
            return
        self._dirs.put(path)
        if not self._threads:
            for _ in range(THREADS):
                thread = threading.Thread(target=self._run, name="list-ahead", daemon=True)
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        """Start no listing from now on."""
        with self._lock:
            self._stopped = True

    @property
    def idle(self) -> bool:
        """Whether no listing is in flight."""
        with self._lock:
            return self._busy == 0

    def close(self) -> None:
        """Stop the threads, once the view is unmounted (a listing under way then fails)."""
        for _ in self._threads:
            self._dirs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def _run(self) -> None:
        while (path := self._dirs.get()) is not None:
            with self._lock:
                if self._stopped:
                    continue
                self._busy += 1
            try:
                with contextlib.suppress(OSError):
                    os.listdir(self._root + b"/" + path if path else self._root)
            finally:
                with self._lock:
                    self._busy -= 1
