"""Persistence of the upper layer: metadata in delta.db (plain SQL, one place), file contents
in `data/<ino>` beside it.

The filesystem keeps the metadata in memory and hands this store whole batches at commit time,
so a failed commit (a full disk) rolls back cleanly and the batch can be retried: the database
only ever holds states the filesystem really had. File contents are written straight into their
data files (sparse; a missing file reads as zeros), once, instead of into SQLite's WAL and again
at checkpoint; a data file is removed only after the commit that deleted its node. Files up to
`INLINE_MAX` are rows of `inline_data` instead, committed with their metadata.

WAL with `synchronous = NORMAL`: a kill -9 loses nothing committed, and a durable commit
(`fsync(2)`) fsyncs the WAL too. A new delta.db has `auto_vacuum=INCREMENTAL`; `shrink` gives
free pages back once they are over a quarter of the file and 4 MiB, then truncates the WAL.
A fork's copy (`copy_delta`) takes delta.db by SQLite's online backup and the data files by
their extents, so holes stay holes. `DeltaAt` answers as of a checkpoint, read only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import apsw

from gitsess.errors import GitsessError
from gitsess.overlay import filecopy, history, schema, usage
from gitsess.overlay.history import History
from gitsess.store.db import BUSY_TIMEOUT_MS
from gitsess.store.sqlvalue import blob, integer, scalar, text

# Numbers handed to nodes the session creates start far above what local filesystems give their
# own inodes, so they do not meet the lower layer's numbers that unchanged files show through.
FIRST_ALLOCATED_INO = 1 << 44


class DamagedDelta(GitsessError):
    """A session's delta.db that SQLite cannot read: that session's error, not the repository's
    (`ls` marks it, `rm --force` removes it)."""

    def __init__(self, delta: Path, error: Exception) -> None:
        super().__init__(
            f"{delta} is damaged ({error}): the session's changes cannot be read; "
            "`gitsess rm --force` removes the session without archiving them"
        )


@dataclass
class NodeRow:
    ino: int
    mode: int
    uid: int
    gid: int
    rdev: int
    size: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    nlink: int
    origin: bytes | None
    data: int
    target: bytes | None
    origin_mode: int | None
    origin_size: int | None
    origin_mtime_ns: int | None


NODE_COLUMNS = (
    "ino, mode, uid, gid, rdev, size, atime_ns, mtime_ns, ctime_ns, nlink, origin, data, target,"
    " origin_mode, origin_size, origin_mtime_ns"
)


# nodes.data of a file whose bytes are in `inline_data` (0: the lower file's, 1: its data file's)
INLINE = 2


@dataclass
class Batch:
    """Everything one commit writes; applied in this order inside one transaction."""

    deleted_nodes: set[int]
    nodes: list[NodeRow]
    dentries: dict[tuple[int, bytes], int | None]  # None deletes the dentry
    xattrs: dict[tuple[int, bytes], bytes | None]
    meta: dict[str, int | str]
    processes: list[tuple[int, int, str, str]]
    events: list[tuple[object, ...]]
    drift: dict[str, int]
    undrift: set[str]  # paths (and what lies below them) the session no longer holds
    inline: dict[int, bytes | None]  # bytes of inline files; None: no longer inline


_Key = TypeVar("_Key", bound=tuple[object, ...])


def copy_delta(src: str, dest: str) -> None:
    """Copy the delta.db at `src` and its data files to `dest`. The database copy is consistent
    by itself (SQLite's online backup); the data files only match it when nothing writes them
    meanwhile: the caller stops the session's daemon from serving, or holds its mount lock."""
    source = schema.connect(src, readonly=True)
    try:
        target = apsw.Connection(dest)
        target.set_busy_timeout(BUSY_TIMEOUT_MS)
        try:
            with target.backup("main", source, "main") as backup:
                while not backup.done:
                    backup.step(-1)
            target.execute("PRAGMA journal_mode=WAL")
        finally:
            target.close()
    finally:
        source.close()
    copy_data(src, dest)
    history.copy_saved(schema.data_dir(src), schema.data_dir(dest))


def copy_data(src: str, dest: str) -> None:
    """Copy the data files of the delta.db at `src` beside the one at `dest`, holes kept holes
    (a sparse 5 GiB file stays a few blocks)."""
    src_dir, dest_dir = schema.data_dir(src), schema.data_dir(dest)
    try:
        names = os.listdir(src_dir)
    except FileNotFoundError:
        return
    os.makedirs(dest_dir, mode=0o700, exist_ok=True)
    st = os.lstat(dest_dir)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(errno.EPERM, f"{dest_dir} is not a directory of this user's")
    for name in names:
        # a reflink where the filesystem has them; never through a link planted there
        filecopy.copy_file(os.path.join(src_dir, name), os.path.join(dest_dir, name))


# `shrink`: free pages worth giving back (4 MiB of 4 KiB pages), and SQLite's auto_vacuum mode.
SHRINK_MIN_PAGES = 1024
INCREMENTAL_VACUUM = 2


class DeltaStore:
    def __init__(self, path: str, *, readonly: bool = False) -> None:
        self.path = path
        self.data_dir = schema.data_dir(path)
        self.conn = schema.connect(path, readonly=readonly)
        self._wal_fd: int | None = None
        # A shrink's checkpoint did not copy the whole WAL back: delta.db keeps its old size
        # until one does, and an idle daemon commits nothing that would start one.
        self._unfinished = False
        self.history: History | None = None
        if not readonly:
            self._init_meta()
            self.history = History(self.conn, self.data_dir)

    def _init_meta(self) -> None:
        if self.conn.execute("SELECT count(*) FROM meta").fetchall()[0][0]:
            return
        self.conn.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('next_ino', ?)",
            (FIRST_ALLOCATED_INO,),
        )

    def meta(self, key: str, default: int | str) -> int | str:
        rows = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
        if not rows:
            return default
        value = rows[0][0]
        assert isinstance(value, int | str)
        return value

    def nodes(self) -> Iterator[NodeRow]:
        for row in self.conn.execute(f"SELECT {NODE_COLUMNS} FROM nodes"):
            yield NodeRow(*row)

    def live_bytes(self) -> int:
        """The bytes of delta.db in use (its size less its free pages)."""
        return usage.live_bytes(self.conn)

    def shrink(self, *, eager: bool = False) -> bool:
        """Give free pages back to the disk once they are over a quarter of delta.db (and over
        SHRINK_MIN_PAGES): incrementally where the file allows it, else by one VACUUM, which
        also makes it allow it from then on. Whether it shrank. `eager` (after a trim of the
        history, which freed them on purpose): over SHRINK_MIN_PAGES is enough, and the WAL,
        which holds the trim's pages, is truncated anyway. A shrink whose checkpoint could not
        finish (another checkpoint ran, a reader's snapshot) finishes it at the next call."""
        pages, free, mode = (
            schema.pragma(self.conn, p) for p in ("page_count", "freelist_count", "auto_vacuum")
        )
        if free < SHRINK_MIN_PAGES or (free * 4 < pages and not eager):
            if eager:
                self.checkpoint()
            elif self._unfinished:
                self._checkpoint_now()
            return False
        # (fetched: a pragma that returns rows does its work a row at a time)
        if mode == INCREMENTAL_VACUUM:
            self.conn.execute(f"PRAGMA incremental_vacuum({free})").fetchall()
        else:  # a delta.db made before: converted once
            self.conn.execute("PRAGMA auto_vacuum=INCREMENTAL").fetchall()
            self.conn.execute("VACUUM").fetchall()
        self.checkpoint()
        return True

    def checkpoint(self) -> None:
        """Copy the WAL into delta.db and truncate it: its disk space back. A database file
        is cut to its new size only by a checkpoint that copied all of the WAL."""
        self._unfinished = True  # (also when it raises: busy, or a full disk)
        busy = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0][0]
        self._unfinished = bool(busy)

    def _checkpoint_now(self) -> None:
        """`checkpoint` without waiting for a reader: the daemon's next look tries again."""
        self.conn.set_busy_timeout(0)
        try:
            self.checkpoint()
        finally:
            self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)

    def holds_changes(self) -> bool:
        """Whether the session changed any name, or keeps any key-value."""
        found = self.conn.execute(
            "SELECT EXISTS(SELECT 1 FROM dentries) OR EXISTS(SELECT 1 FROM kv)"
        ).fetchall()
        return bool(found[0][0])

    def removals(self) -> dict[str, int]:
        """When the session last took each path away from the worktree's view (removed it,
        renamed it away or renamed another file over it), from its event log."""
        rows = self.conn.execute(
            "SELECT path, max(time_ns) FROM events WHERE op IN ('unlink', 'rmdir', 'rename')"
            " GROUP BY path"
            " UNION ALL SELECT target, max(time_ns) FROM events"
            " WHERE op = 'rename' AND target IS NOT NULL GROUP BY target"
        )
        out: dict[str, int] = {}
        for value, time_ns in rows:
            path = from_sql_path(value)
            out[path] = max(time_ns, out.get(path, 0))
        return out

    def dentries(self) -> Iterator[tuple[int, bytes, int]]:
        for parent, name, ino in self.conn.execute("SELECT parent, name, ino FROM dentries"):
            assert isinstance(parent, int) and isinstance(name, bytes) and isinstance(ino, int)
            yield parent, name, ino

    def data_path(self, ino: int) -> str:
        return os.path.join(self.data_dir, str(ino))

    def data_files(self) -> Iterator[int]:
        """The number of every data file."""
        try:
            it = os.scandir(self.data_dir)
        except FileNotFoundError:
            return
        with it:
            for entry in it:
                if entry.name.isdigit():
                    yield int(entry.name)

    def remove_data(self, inos: Iterable[int]) -> None:
        """Data files that go; one a checkpoint still needs moves into its keeping."""
        for ino in inos:
            if self.history is not None:
                self.history.retire_data(ino, self.data_path(ino))
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.data_path(ino))

    def keep_data(self, ino: int) -> None:
        """Before a data file is changed in place (see `History.keep_data`)."""
        if self.history is not None:
            self.history.keep_data(ino, self.data_path(ino))

    def inline(self, ino: int) -> bytes:
        """The committed bytes of an inline file (data = INLINE)."""
        rows = self.conn.execute("SELECT bytes FROM inline_data WHERE ino = ?", (ino,)).fetchall()
        return blob(rows[0][0]) if rows else b""

    def next_process_id(self) -> int:
        return integer(scalar(self.conn, "SELECT coalesce(max(id), 0) + 1 FROM processes"))

    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        rows = self.conn.execute("SELECT name, value FROM xattrs WHERE ino = ?", (ino,))
        return {bytes(name): bytes(value) for name, value in rows}

    def all_xattr_inos(self) -> set[int]:
        return {int(r[0]) for r in self.conn.execute("SELECT DISTINCT ino FROM xattrs")}

    def commit(self, batch: Batch, *, durable: bool) -> None:
        """Write one batch atomically; with `durable`, also force the WAL to stable storage."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            saved = self._save(batch)
            self._write(batch)
            # In the try: a full disk fails the COMMIT too (the WAL grows there), and its
            # transaction must not stay open for the next batch to trip over.
            self.conn.execute("COMMIT")
        except BaseException:
            if not self.conn.getautocommit():
                self.conn.execute("ROLLBACK")
            raise
        if self.history is not None:
            self.history.saved(*saved)
        if durable:
            self._sync_wal()

    def mark(
        self,
        kind: str,
        message: str,
        run_id: object = None,
        role: object = None,
        *,
        always: bool = False,
    ) -> history.Checkpoint | None:
        """A checkpoint of what is committed (see `History.new_checkpoint`)."""
        assert self.history is not None
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            made = self.history.new_checkpoint(
                kind,
                message,
                run_id if isinstance(run_id, int) else None,
                role if isinstance(role, str) else None,
                always=always,
            )
            self.conn.execute("COMMIT")
        except BaseException:
            if not self.conn.getautocommit():
                self.conn.execute("ROLLBACK")
            self.history.epoch = history.epoch_of(self.conn)
            raise
        return made

    def rewind(self, target: int, kind: str) -> history.Rewound:
        assert self.history is not None
        return self.history.rewind(target, kind)

    def _save(self, b: Batch) -> tuple[set[int], set[tuple[int, bytes]]]:
        """What the checkpoints need of the rows this batch changes, saved first."""
        if self.history is None or not self.history.current_epoch():
            return set(), set()
        inos = {n.ino for n in b.nodes}
        inos.update(ino for ino, _ in b.xattrs)
        inos.update(b.inline)
        return self.history.save_rows(inos, b.deleted_nodes, b.dentries)

    def _write(self, b: Batch) -> None:
        # One executemany per statement: a batch of thousands of rows (an `rm -rf`, an apply's
        # drop) cost an execute per row before.
        c = self.conn
        self._delete_nodes(b.deleted_nodes)
        c.executemany(
            f"INSERT OR REPLACE INTO nodes ({NODE_COLUMNS})"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [tuple(vars(n).values()) for n in b.nodes],
        )
        self._apply(
            b.dentries,
            "DELETE FROM dentries WHERE parent = ? AND name = ?",
            "INSERT OR REPLACE INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
        )
        self._apply(
            b.xattrs,
            "DELETE FROM xattrs WHERE ino = ? AND name = ?",
            "INSERT OR REPLACE INTO xattrs (ino, name, value) VALUES (?, ?, ?)",
        )
        c.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", list(b.meta.items())
        )
        c.executemany(
            "INSERT OR REPLACE INTO processes (id, pid, name, cmdline) VALUES (?, ?, ?, ?)",
            b.processes,
        )
        c.executemany(
            "INSERT INTO events (time_ns, op, path, target, bytes, pid, process, role, run_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(t, op, sql_path(path), sql_path(target), *rest)
             for t, op, path, target, *rest in b.events],
        )  # fmt: skip
        undrift = [sql_path(path) for path in b.undrift]
        c.executemany(
            "DELETE FROM drift WHERE path = ? OR substr(path, 1, ?) = ?",
            [(p, len(p) + 1, p + ("/" if isinstance(p, str) else b"/")) for p in undrift],
        )
        c.executemany(
            "INSERT OR REPLACE INTO drift (path, time_ns) VALUES (?, ?)",
            [(sql_path(path), t) for path, t in b.drift.items()],
        )
        self._apply(
            {(ino,): content for ino, content in b.inline.items()},
            "DELETE FROM inline_data WHERE ino = ?",
            "INSERT OR REPLACE INTO inline_data (ino, bytes) VALUES (?, ?)",
        )

    def _apply(self, changes: Mapping[_Key, object], delete: str, write: str) -> None:
        """`delete` the rows of the keys that map to None, `write` the others (their key's
        fields, then the value)."""
        self.conn.executemany(delete, [key for key, value in changes.items() if value is None])
        self.conn.executemany(
            write, [(*key, value) for key, value in changes.items() if value is not None]
        )

    def _delete_nodes(self, inos: Iterable[int]) -> None:
        rows = [(ino,) for ino in inos]
        for sql in (
            "DELETE FROM nodes WHERE ino = ?",
            "DELETE FROM xattrs WHERE ino = ?",
            "DELETE FROM inline_data WHERE ino = ?",
            "DELETE FROM dentries WHERE parent = ?",
        ):
            self.conn.executemany(sql, rows)

    def _sync_wal(self) -> None:
        if self._wal_fd is None:
            self._wal_fd = os.open(self.path + "-wal", os.O_RDONLY | os.O_CLOEXEC)
        os.fsync(self._wal_fd)

    def delete_nodes(self, inos: Iterable[int]) -> None:
        """Drop orphans left by a crash: nodes that no directory names any more (their data
        files are then strays, see `Tree.remove_stray_data`)."""
        inos = set(inos)
        with self.conn:
            if self.history is not None:
                self.history.save_rows((), inos, ())
            self._delete_nodes(inos)
        if self.history is not None:
            self.history.saved(set(), set())

    def close(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        self.conn.close()


# ---------------------------------------------------------------- queries on a connection of
# their own, beside a live daemon: the audit log and drift (`services/timeline.py`, read only)
# and the `kv` table (`services/kv.py`), which the daemon never touches

_EVENT_COLUMNS = (
    "e.id, e.time_ns, e.op, e.path, e.target, e.bytes, e.pid, p.name, p.cmdline, e.role, e.run_id"
)


def max_event_id(conn: apsw.Connection) -> int:
    return integer(scalar(conn, "SELECT coalesce(max(id), 0) FROM events"))


def event_rows(
    conn: apsw.Connection,
    *,
    after_id: int,
    upto_id: int | None,
    since_ns: int | None,
    path: str | None,
    pid: int | None,
    ops: tuple[str, ...],
    run_id: int | None,
) -> list[tuple[Any, ...]]:
    """Events (as _EVENT_COLUMNS) with ids in (after_id, upto_id], matching every given filter;
    `path` is a glob, and matches what is below it too."""
    where = ["e.id > ?"]
    args: list[Any] = [after_id]
    if upto_id is not None:
        where.append("e.id <= ?")
        args.append(upto_id)
    if since_ns is not None:
        where.append("e.time_ns >= ?")
        args.append(since_ns)
    if path is not None:
        # A rename or link matches by either end (a symlink's target is no path of ours).
        where.append(
            "(e.path GLOB ? OR e.path GLOB ? || '/*' OR (e.op IN ('rename', 'link')"
            " AND (e.target GLOB ? OR e.target GLOB ? || '/*')))"
        )
        args += [path] * 4
    if pid is not None:
        where.append("e.pid = ?")
        args.append(pid)
    if ops:
        where.append(f"e.op IN ({', '.join('?' * len(ops))})")
        args += ops
    if run_id is not None:
        where.append("e.run_id = ?")
        args.append(run_id)
    sql = (
        f"SELECT {_EVENT_COLUMNS} FROM events e LEFT JOIN processes p ON p.id = e.process"
        f" WHERE {' AND '.join(where)} ORDER BY e.id"
    )
    rows = conn.execute(sql, tuple(args)).fetchall()
    return [(*r[:3], from_sql_path(r[3]), from_sql_path(r[4]), *r[5:]) for r in rows]


def op_counts(conn: apsw.Connection) -> dict[str, int]:
    """How many events of each operation the log holds."""
    rows = conn.execute("SELECT op, count(*) FROM events GROUP BY op").fetchall()
    return {text(op): integer(n) for op, n in rows}


def drift_rows(conn: apsw.Connection, *, after_ns: int) -> list[tuple[str, int]]:
    rows = conn.execute(
        "SELECT path, time_ns FROM drift WHERE time_ns > ? ORDER BY time_ns, path", (after_ns,)
    ).fetchall()
    return [(from_sql_path(path), integer(time_ns)) for path, time_ns in rows]


def sql_path(path: Any) -> Any:
    """A path (os.fsdecode'd) as SQLite keeps it: text when it is UTF-8, else its bytes (a
    BLOB; SQLite's text is UTF-8 only, and a file name is bytes, as in git)."""
    if isinstance(path, str):
        try:
            path.encode()
        except UnicodeEncodeError:
            return os.fsencode(path)
    return path


def from_sql_path(value: Any) -> Any:
    """`sql_path` undone."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


class DeltaAt(DeltaStore):
    """The delta as it was at a checkpoint, read only: what `fs cat --at`, `diff --from` and a
    fork `--at` read through the same `Tree`."""

    def __init__(self, path: str, at: int) -> None:
        super().__init__(path, readonly=True)
        self.at = at
        self._root = usage.cp_root(self.data_dir)
        if not history.exists(self.conn, at):
            self.conn.close()
            raise history.no_such(at)

    def nodes(self) -> Iterator[NodeRow]:
        for row in history.state_rows(self.conn, self.at):
            yield NodeRow(*row)  # type: ignore[arg-type]

    def dentries(self) -> Iterator[tuple[int, bytes, int]]:
        for parent, name, ino in history.state_dentries(self.conn, self.at):
            assert isinstance(parent, int) and isinstance(name, bytes) and isinstance(ino, int)
            yield parent, name, ino

    def all_xattr_inos(self) -> set[int]:
        return {r.ino for r in self.nodes() if self.xattrs(r.ino)}

    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        return history.state_xattrs(self.conn, self.at, ino)

    def inline(self, ino: int) -> bytes:
        return history.state_inline(self.conn, self.at, ino)

    def data_path(self, ino: int) -> str:
        saved = history.data_at(self._root, self.at, ino)
        return saved if saved is not None else super().data_path(ino)
