"""Checkpoints of a delta: what the session held at a moment, kept by saving each row and data
file once, on its first change after a checkpoint (never a copy of the delta).

The *epoch* (`meta.epoch`) is the id of the newest checkpoint, 0 while there is none. Before a
key (a node with its xattrs and inline bytes, a name in a directory, a data file) first changes
in epoch E, its state then, which is its state at checkpoint E, is saved under E (`cp_*` rows;
data files in `checkpoints/E/<ino>`). A key's state at checkpoint C is then its earliest saved
state of an epoch >= C, or, if none, its current one: it has not changed since. So a checkpoint
costs one row, a write after it one save per key, and a write with no checkpoint since its
key's last save a set lookup (`_nodes`, `_dentries`, `_data`, filled from the epoch's rows the
first time the epoch is seen: an earlier daemon may have saved some). Rows are saved inside the
writer's batch transaction (`DeltaStore.commit` calls `save_rows` before it writes), so a save
and the change it precedes commit together. A data file is saved before its first change in
place (`DeltaStore.keep_data`, from the tree's writes and truncates) by a reflink where the
filesystem has them, else a copy that keeps holes; a data file that goes is renamed into the
checkpoint's directory (`retire_data`), so deleting a big file after a checkpoint copies
nothing. `.git` is rows like any path but its object store, a directory of its own whose files
are immutable: a checkpoint hard-links those it lacks into `kept/` first (`objectdir.keep`), and
a rewind links back what the store lost since, so the objects of every checkpoint's refs stay,
whatever a `git gc` in the session removes.

A rewind to C first makes a checkpoint (the state before it, N), then writes every key saved
at an epoch >= C back to its state at C through the same saving, so everything it replaced is
saved under N and `undo` rewinds to N. It is one transaction; data files are copied aside
first (`<ino>.rw`) and renamed into place after the commit, which records them, so that a
process killed at any point leaves the old state or the new one (`finish_rewind` completes
the renames on the next open; without its record, `clear_unfinished` removes the copies and
the saves under an epoch no checkpoint has).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apsw

from gitsess.durable import fsync_dir
from gitsess.errors import GitsessError
from gitsess.overlay import layout, objectdir
from gitsess.overlay.filecopy import copy_file
from gitsess.overlay.usage import cp_root, epochs_on_disk
from gitsess.store.sqlvalue import blob, integer, scalar

CP_DIR = layout.CHECKPOINTS
# Data files copied for a rewind wait here under their number and this until its commit.
REWIND_SUFFIX = ".rw"

_NODE_VALUES = (
    "mode, uid, gid, rdev, size, atime_ns, mtime_ns, ctime_ns, nlink, origin, data, target,"
    " origin_mode, origin_size, origin_mtime_ns"
)


@dataclass(frozen=True)
class Checkpoint:
    """One row of `checkpoints`: who made it, and what changed since the one before it."""

    id: int
    time_ns: int
    kind: str  # run, turn, manual, rewind (the state a rewind or undo replaced)
    message: str
    run_id: int | None
    role: str | None
    added: int
    removed: int
    changed: int


@dataclass(frozen=True)
class Operation:
    """A rewind or undo in the operation log: the checkpoint it went to, the one saving the
    state it replaced (`before`) and the one of the state it left (`after`)."""

    id: int
    time_ns: int
    kind: str
    target: int
    before: int
    after: int
    keys: int


@dataclass(frozen=True)
class Rewound:
    """What a rewind changed: names (directory ino, name) and nodes, for the kernel's caches."""

    operation: Operation
    entries: list[tuple[int, bytes]]
    inodes: list[int]


class History:
    """The saving side, owned by a writing `DeltaStore`."""

    def __init__(self, conn: apsw.Connection, data_dir: str) -> None:
        self.conn = conn
        self.data_dir = data_dir
        self.root = cp_root(data_dir)
        # (whose object store a checkpoint keeps: `objectdir.keep`)
        self._session_dir = os.fsencode(os.path.dirname(data_dir))
        self.epoch = epoch_of(conn)
        # Keys saved in `epoch` already; filled from the database when the epoch is first seen,
        # since another process (an earlier daemon) may have saved some.
        self._loaded_epoch = -1
        self._nodes: set[int] = set()
        self._dentries: set[tuple[int, bytes]] = set()
        self._data: set[int] = set()

    # ------------------------------------------------------------ saving

    def _sets_for(self, epoch: int) -> None:
        if self._loaded_epoch == epoch:
            return
        c = self.conn
        self._nodes = {
            int(r[0]) for r in c.execute("SELECT ino FROM cp_nodes WHERE epoch = ?", (epoch,))
        }
        self._dentries = {
            (int(p), bytes(n))
            for p, n in c.execute("SELECT parent, name FROM cp_dentries WHERE epoch = ?", (epoch,))
        }
        try:
            self._data = {
                int(n) for n in os.listdir(os.path.join(self.root, str(epoch))) if n.isdigit()
            }
        except FileNotFoundError:
            self._data = set()
        self._loaded_epoch = epoch

    def current_epoch(self) -> int:
        """The epoch as delta.db has it (inside the writer's transaction)."""
        self.epoch = epoch_of(self.conn)
        return self.epoch

    def save_rows(
        self,
        node_inos: Iterable[int],
        deleted: Iterable[int],
        dentries: Iterable[tuple[int, bytes]],
    ) -> tuple[set[int], set[tuple[int, bytes]]]:
        """Inside the writer's transaction, before it changes these keys: save those not yet
        saved in this epoch. Returns what it saved, for `saved` once the transaction commits."""
        epoch = self.epoch = epoch_of(self.conn)
        if not epoch:
            return set(), set()
        self._sets_for(epoch)
        c = self.conn
        deleted = list(deleted)
        names = set(dentries)
        for ino in deleted:
            for (name,) in c.execute(
                "SELECT name FROM dentries WHERE parent = ?", (ino,)
            ).fetchall():
                names.add((ino, blob(name)))
        written = set(node_inos)
        new_nodes = {i for i in (*written, *deleted) if i not in self._nodes}
        new_names = names - self._dentries
        # (deleting a node that has no row, one a rewind took away, changes nothing)
        _save_nodes(c, new_nodes, epoch, absent=new_nodes & written)
        # One executemany per statement: git inside a run writing 5,000 loose objects made
        # four statements a file, a fifth of the daemon's time in its commits.
        names_at = [(epoch, parent, name) for parent, name in new_names]
        c.executemany(
            "INSERT OR IGNORE INTO cp_dentries (parent, name, epoch, ino)"
            " SELECT parent, name, ?1, ino FROM dentries WHERE parent = ?2 AND name = ?3",
            names_at,
        )
        c.executemany(
            "INSERT OR IGNORE INTO cp_dentries (parent, name, epoch, ino)"
            " VALUES (?2, ?3, ?1, NULL)",
            names_at,
        )
        return new_nodes, new_names

    def saved(self, nodes: set[int], names: set[tuple[int, bytes]]) -> None:
        if self._loaded_epoch == self.epoch:
            self._nodes |= nodes
            self._dentries |= names

    def keep_data(self, ino: int, path: str) -> None:
        """Before the data file at `path` is changed in place: save it, once per epoch."""
        if not self.epoch or (self._loaded_epoch == self.epoch and ino in self._data):
            return
        self._sets_for(self.epoch)
        if ino in self._data:
            return
        dest = self._epoch_dir(self.epoch)
        tmp = os.path.join(dest, f"{ino}.tmp")
        try:
            copy_file(path, tmp)
        except FileNotFoundError:
            # No data file reads as zeros up to the size: so does an empty one.
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600))
        os.rename(tmp, os.path.join(dest, str(ino)))
        self._data.add(ino)

    def retire_data(self, ino: int, path: str) -> None:
        """A data file that goes: moved into the epoch's checkpoint dir if it is not saved
        there yet (a rename: no copy), removed otherwise."""
        if self.epoch:
            self._sets_for(self.epoch)
            if ino not in self._data:
                try:
                    os.rename(path, os.path.join(self._epoch_dir(self.epoch), str(ino)))
                except FileNotFoundError:
                    return
                self._data.add(ino)
                return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def _epoch_dir(self, epoch: int) -> str:
        path = os.path.join(self.root, str(epoch))
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    # ------------------------------------------------------------ checkpoints

    def new_checkpoint(
        self, kind: str, message: str, run_id: int | None, role: str | None, *, always: bool
    ) -> Checkpoint | None:
        """Inside a transaction: a checkpoint of the committed state. Without `always`, none
        when nothing changed since the newest (a run that writes nothing costs nothing)."""
        c = self.conn
        prev = epoch_of(c)
        if prev and not always and not changed_since(c, self.root, prev):
            return None
        # (before the row: no checkpoint without its objects)
        objectdir.keep(self._session_dir)
        added, removed, changed = _counts(c, prev)
        now = time.time_ns()
        c.execute(
            "INSERT INTO checkpoints (time_ns, kind, message, run_id, role, added, removed,"
            " changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (now, kind, message, run_id, role, added, removed, changed),
        )
        cp = c.last_insert_rowid()
        c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('epoch', ?)", (cp,))
        self.epoch = cp
        # A directory of this number may be left by a rewind killed before its commit.
        shutil.rmtree(os.path.join(self.root, str(cp)), ignore_errors=True)
        return Checkpoint(cp, now, kind, message, run_id, role, added, removed, changed)

    # ------------------------------------------------------------ rewinding

    def rewind(self, target: int, kind: str) -> Rewound:
        """Bring every key back to its state at checkpoint `target`; the caller holds no
        transaction and has committed everything pending."""
        c = self.conn
        if not exists(c, target):
            raise KeyError(target)
        datas = _saved_data(self.root, target)
        prepared: dict[int, str | None] = {}
        # the objects before the refs that may name them
        objectdir.bring_back(self._session_dir)
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                before = self.new_checkpoint(
                    kind, f"before {kind} to {target}", None, None, always=True
                )
                assert before is not None
                node_rows = c.execute(
                    f"SELECT ino, present, {_NODE_VALUES}, epoch FROM cp_nodes h WHERE epoch >= ?"
                    " AND epoch = (SELECT min(epoch) FROM cp_nodes"
                    " WHERE ino = h.ino AND epoch >= ?)",
                    (target, target),
                ).fetchall()
                name_rows = c.execute(
                    "SELECT parent, name, ino FROM cp_dentries h WHERE epoch >= ? AND epoch ="
                    " (SELECT min(epoch) FROM cp_dentries WHERE parent = h.parent"
                    " AND name = h.name AND epoch >= ?)",
                    (target, target),
                ).fetchall()
                inos = [integer(r[0]) for r in node_rows]
                names = [(integer(p), blob(n)) for p, n, _ in name_rows]
                self.save_rows(inos, (), names)
                present_data: dict[int, bool] = {}
                for row in node_rows:
                    node, present = integer(row[0]), bool(row[1])
                    saved_at = integer(row[-1])
                    for table in ("nodes", "xattrs", "inline_data"):
                        c.execute(f"DELETE FROM {table} WHERE ino = ?", (node,))
                    if present:
                        _restore_node(c, node, saved_at)
                    is_file = present and stat.S_ISREG(integer(row[2]))
                    present_data[node] = is_file and row[12] == 1
                for parent, name, child in name_rows:
                    if child is None:
                        c.execute(
                            "DELETE FROM dentries WHERE parent = ? AND name = ?", (parent, name)
                        )
                    else:
                        c.execute(
                            "INSERT OR REPLACE INTO dentries (parent, name, ino) VALUES (?, ?, ?)",
                            (parent, name, child),
                        )
                for number, src in datas.items():
                    wanted = present_data.get(number)
                    if wanted is None:
                        wanted = _reads_data(c, number)
                    prepared[number] = src if wanted else None
                for number, target_data in prepared.items():
                    self._prepare_data(number, target_data)
                after = self.new_checkpoint(
                    kind, f"after {kind} to {target}", None, None, always=True
                )
                assert after is not None
                c.execute(
                    "INSERT INTO operations (time_ns, kind, target, before, after, keys)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (time.time_ns(), kind, target, before.id, after.id, len(inos) + len(names)),
                )
                op_id = c.last_insert_rowid()
                c.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('rewind_data', ?)",
                    (json.dumps(sorted(prepared)),),
                )
                c.execute("COMMIT")
            except BaseException:
                if not c.getautocommit():
                    c.execute("ROLLBACK")
                raise
        except BaseException:
            self.epoch = epoch_of(c)
            self._loaded_epoch = -1
            for ino in prepared:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._rw(ino))
            raise
        self._loaded_epoch = -1
        self.finish_rewind()
        op = Operation(
            op_id, time.time_ns(), kind, target, before.id, after.id, len(inos) + len(names)
        )
        entries = sorted(set(names))
        return Rewound(op, entries, sorted(set(inos) | set(prepared)))

    def changed_inodes(self, target: int) -> set[int]:
        """The nodes a rewind to `target` would change (their rows or data)."""
        rows = self.conn.execute("SELECT DISTINCT ino FROM cp_nodes WHERE epoch >= ?", (target,))
        return {int(r[0]) for r in rows} | set(_saved_data(self.root, target))

    def gone_at(self, target: int) -> set[int]:
        """The nodes a rewind to `target` removes: their earliest save since says they did not
        exist then."""
        rows = self.conn.execute(
            "SELECT ino FROM cp_nodes h WHERE epoch >= ? AND NOT present"
            " AND epoch = (SELECT min(epoch) FROM cp_nodes WHERE ino = h.ino AND epoch >= ?)",
            (target, target),
        )
        return {int(r[0]) for r in rows}

    def _rw(self, ino: int) -> str:
        return os.path.join(self.data_dir, f"{ino}{REWIND_SUFFIX}")

    def _prepare_data(self, ino: int, src: str | None) -> None:
        """The data file `ino` gets after the commit: a copy of `src` waiting beside it, or an
        empty marker meaning "none"; what it replaces is saved under the `before` epoch."""
        os.makedirs(self.data_dir, mode=0o700, exist_ok=True)
        current = os.path.join(self.data_dir, str(ino))
        epoch_dir = self._epoch_dir(self.epoch)
        saved = os.path.join(epoch_dir, str(ino))
        if not os.path.exists(saved):
            try:
                # a link, not a copy: the data file is replaced by a rename, never written in place
                os.link(current, saved)
            except FileNotFoundError:
                os.close(os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        if src is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._rw(ino))
            os.symlink("none", self._rw(ino))
        else:
            copy_file(src, self._rw(ino))

    def finish_rewind(self) -> None:
        """Put the data files of a committed rewind in place (again, after a crash)."""
        rows = self.conn.execute("SELECT value FROM meta WHERE key = 'rewind_data'").fetchall()
        if not rows:
            return
        for ino in json.loads(str(rows[0][0])):
            rw = self._rw(int(ino))
            current = os.path.join(self.data_dir, str(ino))
            if os.path.islink(rw):
                os.unlink(rw)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(current)
            elif os.path.exists(rw):
                os.rename(rw, current)
        fsync_dir(self.data_dir)
        with self.conn:
            self.conn.execute("DELETE FROM meta WHERE key = 'rewind_data'")

    def clear_unfinished(self) -> None:
        """After a crash before a rewind's commit: its copies, and saves under epochs that no
        checkpoint has (yet)."""
        if self.conn.execute("SELECT 1 FROM meta WHERE key = 'rewind_data'").fetchall():
            self.finish_rewind()
            return
        try:
            names = os.listdir(self.data_dir)
        except FileNotFoundError:
            names = []
        for name in names:
            if name.endswith(REWIND_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.data_dir, name))
        for e in epochs_on_disk(self.root):
            if e > self.epoch:
                shutil.rmtree(os.path.join(self.root, str(e)), ignore_errors=True)

    # ------------------------------------------------------------ retention

    def prune(self, keep: int, max_age_ns: int, now_ns: int) -> int:
        """Drop the oldest checkpoints beyond `keep` or older than `max_age_ns`, and everything
        only they needed. Returns how many went."""
        c = self.conn
        ids = [
            (int(i), int(t))
            for i, t in c.execute("SELECT id, time_ns FROM checkpoints ORDER BY id DESC")
        ]
        kept = [i for n, (i, t) in enumerate(ids) if n < keep and now_ns - t <= max_age_ns]
        gone = [i for i, _ in ids if i not in set(kept)]
        if not gone:
            return 0
        # With none kept, nothing saved so far is needed, and nothing is saved from now on.
        oldest = min(kept) if kept else ids[0][0] + 1
        with c:
            c.execute("DELETE FROM checkpoints WHERE id < ?", (oldest,))
            if not kept:
                c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('epoch', 0)")
            for table in ("cp_nodes", "cp_xattrs", "cp_inline", "cp_dentries"):
                c.execute(f"DELETE FROM {table} WHERE epoch < ?", (oldest,))
            c.execute("DELETE FROM operations WHERE before < ?", (oldest,))
        self.epoch = epoch_of(c)
        self._loaded_epoch = -1
        for e in epochs_on_disk(self.root):
            if e < oldest:
                shutil.rmtree(os.path.join(self.root, str(e)), ignore_errors=True)
        if not kept:
            # No rewind is left to bring an object back: the store holds what the view needs.
            # (With some checkpoints left, `kept/` keeps all: it does not record which it is
            # kept for.)
            objectdir.drop_kept(self._session_dir)
        return len(gone)


# ---------------------------------------------------------------- helpers on a connection


def exists(conn: apsw.Connection, cp: int) -> bool:
    """Whether checkpoint `cp` exists; a number past SQLite's integers (a user's typo) is
    none, rather than an OverflowError from the query."""
    return 0 < cp < 1 << 63 and bool(
        conn.execute("SELECT 1 FROM checkpoints WHERE id = ?", (cp,)).fetchall()
    )


def epoch_of(conn: apsw.Connection) -> int:
    return integer(scalar(conn, "SELECT value FROM meta WHERE key = 'epoch'") or 0)


def changed_since(conn: apsw.Connection, root: str, cp: int) -> bool:
    """Whether anything was saved at an epoch >= `cp`: the state may differ from it."""
    for table in ("cp_nodes", "cp_dentries"):
        if conn.execute(f"SELECT 1 FROM {table} WHERE epoch >= ? LIMIT 1", (cp,)).fetchall():
            return True
    return any(e >= cp and os.listdir(os.path.join(root, str(e))) for e in epochs_on_disk(root))


def _saved_data(root: str, target: int) -> dict[int, str]:
    """Each data file saved at an epoch >= `target`: its earliest save."""
    out: dict[int, str] = {}
    for e in epochs_on_disk(root):
        if e < target:
            continue
        d = os.path.join(root, str(e))
        for name in os.listdir(d):
            if name.isdigit() and int(name) not in out:
                out[int(name)] = os.path.join(d, name)
    return out


def data_at(root: str, target: int, ino: int) -> str | None:
    """The saved data file of `ino` at checkpoint `target`, None when the current one is it."""
    for e in epochs_on_disk(root):
        if e >= target:
            path = os.path.join(root, str(e), str(ino))
            if os.path.exists(path):
                return path
    return None


def _reads_data(conn: apsw.Connection, ino: int) -> bool:
    rows = conn.execute("SELECT mode, data FROM nodes WHERE ino = ?", (ino,)).fetchall()
    return bool(rows) and rows[0][1] == 1 and stat.S_ISREG(integer(rows[0][0]))


def _save_nodes(c: apsw.Connection, inos: set[int], epoch: int, *, absent: set[int]) -> None:
    """Save nodes `inos`, none saved in `epoch` yet, as they are; those in `absent` also when
    they have no row (then as absent). A node's xattrs and inline bytes have rows only while
    the node has one, so copying them for every node copies them for those that have one."""
    at = [(epoch, ino) for ino in inos]
    c.executemany(
        f"INSERT OR IGNORE INTO cp_nodes (ino, epoch, present, {_NODE_VALUES})"
        f" SELECT ino, ?, 1, {_NODE_VALUES} FROM nodes WHERE ino = ?",
        at,
    )
    c.executemany(
        "INSERT OR IGNORE INTO cp_xattrs (ino, epoch, name, value)"
        " SELECT ino, ?, name, value FROM xattrs WHERE ino = ?",
        at,
    )
    c.executemany(
        "INSERT OR IGNORE INTO cp_inline (ino, epoch, bytes)"
        " SELECT ino, ?, bytes FROM inline_data WHERE ino = ?",
        at,
    )
    # (ignored for those saved as present just above)
    c.executemany(
        "INSERT OR IGNORE INTO cp_nodes (ino, epoch, present) VALUES (?, ?, 0)",
        [(ino, epoch) for ino in absent],
    )


def _restore_node(c: apsw.Connection, ino: int, epoch: int) -> None:
    c.execute(
        f"INSERT INTO nodes (ino, {_NODE_VALUES}) SELECT ino, {_NODE_VALUES} FROM cp_nodes"
        " WHERE ino = ? AND epoch = ?",
        (ino, epoch),
    )
    c.execute(
        "INSERT INTO xattrs (ino, name, value) SELECT ino, name, value FROM cp_xattrs"
        " WHERE ino = ? AND epoch = ?",
        (ino, epoch),
    )
    c.execute(
        "INSERT INTO inline_data (ino, bytes) SELECT ino, bytes FROM cp_inline"
        " WHERE ino = ? AND epoch = ?",
        (ino, epoch),
    )


def _counts(c: apsw.Connection, prev: int) -> tuple[int, int, int]:
    """Names the session added (made, not copied from the worktree) and removed, and files it
    changed otherwise, since checkpoint `prev` (all it holds, without one)."""
    if prev:
        names = c.execute(
            "SELECT h.ino, d.ino, n.origin IS NULL, n.mode FROM cp_dentries h"
            " LEFT JOIN dentries d ON d.parent = h.parent AND d.name = h.name"
            " LEFT JOIN nodes n ON n.ino = d.ino WHERE h.epoch = ?",
            (prev,),
        ).fetchall()
        files = c.execute(
            "SELECT n.ino FROM cp_nodes h JOIN nodes n ON n.ino = h.ino"
            " WHERE h.epoch = ? AND (n.mode & 61440) != 16384",
            (prev,),
        ).fetchall()
    else:
        names = c.execute(
            "SELECT NULL, d.ino, n.origin IS NULL, n.mode FROM dentries d"
            " LEFT JOIN nodes n ON n.ino = d.ino"
        ).fetchall()
        files = c.execute("SELECT ino FROM nodes WHERE (mode & 61440) != 16384").fetchall()
    added = {now for was, now, made, _ in names if not was and now and made}
    removed = sum(1 for was, now, _, _ in names if was != 0 and not now)
    changed = sum(1 for (ino,) in files if ino not in added)
    return len(added), removed, changed


def checkpoints(conn: apsw.Connection) -> list[Checkpoint]:
    return [
        Checkpoint(*row)
        for row in conn.execute(
            "SELECT id, time_ns, kind, message, run_id, role, added, removed, changed"
            " FROM checkpoints ORDER BY id"
        )
    ]


def operations(conn: apsw.Connection) -> list[Operation]:
    return [
        Operation(*row)
        for row in conn.execute(
            "SELECT id, time_ns, kind, target, before, after, keys FROM operations ORDER BY id"
        )
    ]


def copy_saved(src_data_dir: str, dest_data_dir: str) -> None:
    """The saved data files of one delta into another's (a fork keeps the checkpoints)."""
    src, dest = cp_root(src_data_dir), cp_root(dest_data_dir)
    for e in epochs_on_disk(src):
        os.makedirs(os.path.join(dest, str(e)), mode=0o700, exist_ok=True)
        for name in os.listdir(os.path.join(src, str(e))):
            if name.isdigit():
                copy_file(os.path.join(src, str(e), name), os.path.join(dest, str(e), name))


def state_rows(conn: apsw.Connection, at: int) -> Iterator[tuple[object, ...]]:
    """The nodes at checkpoint `at` (as `nodes` columns)."""
    yield from conn.execute(
        f"SELECT ino, {_NODE_VALUES} FROM nodes WHERE ino NOT IN"
        " (SELECT ino FROM cp_nodes WHERE epoch >= ?)"
        f" UNION ALL SELECT ino, {_NODE_VALUES} FROM cp_nodes h WHERE epoch >= ? AND present"
        " AND epoch = (SELECT min(epoch) FROM cp_nodes WHERE ino = h.ino AND epoch >= ?)",
        (at, at, at),
    )


def state_dentries(conn: apsw.Connection, at: int) -> Iterator[tuple[object, ...]]:
    yield from conn.execute(
        "SELECT parent, name, ino FROM dentries d WHERE NOT EXISTS (SELECT 1 FROM cp_dentries"
        " WHERE parent = d.parent AND name = d.name AND epoch >= ?)"
        " UNION ALL SELECT parent, name, ino FROM cp_dentries h WHERE epoch >= ?"
        " AND ino IS NOT NULL AND epoch = (SELECT min(epoch) FROM cp_dentries"
        " WHERE parent = h.parent AND name = h.name AND epoch >= ?)",
        (at, at, at),
    )


def state_xattrs(conn: apsw.Connection, at: int, ino: int) -> dict[bytes, bytes]:
    rows = conn.execute(
        "SELECT min(epoch) FROM cp_nodes WHERE ino = ? AND epoch >= ?", (ino, at)
    ).fetchall()
    if rows and rows[0][0] is not None:
        q = conn.execute(
            "SELECT name, value FROM cp_xattrs WHERE ino = ? AND epoch = ?", (ino, rows[0][0])
        )
    else:
        q = conn.execute("SELECT name, value FROM xattrs WHERE ino = ?", (ino,))
    return {bytes(n): bytes(v) for n, v in q}


def state_inline(conn: apsw.Connection, at: int, ino: int) -> bytes:
    rows = conn.execute(
        "SELECT min(epoch) FROM cp_nodes WHERE ino = ? AND epoch >= ?", (ino, at)
    ).fetchall()
    if rows and rows[0][0] is not None:
        got = conn.execute(
            "SELECT bytes FROM cp_inline WHERE ino = ? AND epoch = ?", (ino, rows[0][0])
        ).fetchall()
    else:
        got = conn.execute("SELECT bytes FROM inline_data WHERE ino = ?", (ino,)).fetchall()
    return blob(got[0][0]) if got else b""


def no_such(cp: int) -> GitsessError:
    return GitsessError(f"no checkpoint {cp} in this session (gitsess checkpoints lists them)")
