"""A live daemon's WAL checkpoints of delta.db, run in a thread instead of in its commits.

SQLite copies the WAL back into the database (a checkpoint) inside the COMMIT that leaves the
WAL over 1,000 pages, and with `synchronous = NORMAL` that COMMIT also syncs the WAL and the
database to the disk. The daemon commits on its main thread, between two FUSE requests: during
a `git add -A && git commit` of 5,000 files inside a run (some 150 commits, each of about 100
loose objects and their inline rows), the 131 COMMITs that checkpointed took 2.8 s of the 3.0 s
all COMMITs took (load 6-7), and every request waited meanwhile (docs/PERFORMANCE.md, "The
write path").

So the daemon's connection never checkpoints by itself: its WAL hook (which replaces SQLite's
automatic checkpoint) only notes how many pages the WAL holds, and once a commit left it over
`WAL_PAGES`, a PASSIVE checkpoint runs on a connection of its own in a worker thread, where
apsw lets go of the GIL inside SQLite. A passive checkpoint takes no lock a writer or a reader
waits for, so commits and requests go on; SQLite starts the WAL over at the first commit after
a checkpoint that copied all of it. Should commits outpace the thread until the WAL holds
`WAL_MAX_PAGES`, the commit loop checkpoints itself, as SQLite would have at every 1,000 pages.
Two checkpoints never run at once: the second fails at once with `apsw.BusyError`, which every
checkpoint of the daemon's takes as "later".
"""

from __future__ import annotations

import contextlib

import apsw
import trio

from gitsess.overlay import schema

# SQLite's own automatic checkpoint threshold (4 MiB of 4 KiB pages), now the thread's.
WAL_PAGES = 1000
# Past this, the commit loop checkpoints on its own thread: the WAL's size stays bounded.
WAL_MAX_PAGES = 16 * WAL_PAGES


class Checkpointer:
    """Checkpoints of `conn`'s database (`path`) in a worker thread (see the module's text)."""

    def __init__(self, conn: apsw.Connection, path: str) -> None:
        self.pages = 0
        self._conn = conn
        # Opened as every other user of delta.db opens it, with the same settings. (A
        # connection opens the WAL at its first read, which the opener makes: until then a
        # checkpoint through it does nothing at all.)
        self._own = schema.connect(path)
        self._wanted = trio.Event()
        conn.set_wal_hook(self._committed)

    def _committed(self, conn: apsw.Connection, name: str, pages: int) -> int:
        # Called by SQLite on the committing thread, inside COMMIT: note, nothing more.
        self.pages = pages
        return apsw.SQLITE_OK

    def committed(self) -> None:
        """After each commit of the daemon's: start a checkpoint if the WAL grew enough."""
        # Taken: an idle daemon's commit loop asks again only after a commit.
        pages, self.pages = self.pages, 0
        if pages >= WAL_MAX_PAGES:
            self._checkpoint(self._conn)
        elif pages >= WAL_PAGES:
            self._wanted.set()

    async def run(self) -> None:
        """The checkpoints `committed` asks for, one at a time, each in a worker thread."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            await trio.to_thread.run_sync(self._checkpoint, self._own)

    def _checkpoint(self, conn: apsw.Connection) -> None:
        # Busy (another checkpoint runs) or a full disk: the WAL keeps everything meanwhile,
        # and the next commit asks again.
        with contextlib.suppress(apsw.Error):
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)

    def close(self) -> None:
        self._conn.set_wal_hook(None)
        self._own.close()
