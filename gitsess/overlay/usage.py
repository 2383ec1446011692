"""A delta's figures: where its bytes go (files, checkpoints, audit log, free pages), what its
data files, checkpoint saves and git objects take on disk, its last event.

`show` and `ls --json` read these through a plain read-only connection: importing the
delta store, the history and the audit log took longer than reading them. `bytes_by_kind`
reads SQLite's `dbstat` (indexes count with their tables).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import apsw

from gitsess.overlay import layout, schema
from gitsess.store.sqlvalue import optional_integer, scalar

# The tables of each kind, as `dbstat` names them (their indexes count with them).
LOG_TABLES = ("events", "processes", "run_summaries", "events_time")
CHECKPOINT_TABLES = ("checkpoints", "operations")


@dataclass(frozen=True)
class Bytes:
    """Where a delta's bytes go: the live view (rows and data files), checkpoints (their rows
    and saved data files), the audit log, and pages free in delta.db."""

    files_bytes: int
    checkpoints_bytes: int
    log_bytes: int
    free_bytes: int


def data_bytes(path: str) -> int:
    """Disk space the data files of the delta.db at `path` take (holes take none)."""
    try:
        it = os.scandir(schema.data_dir(path))
    except FileNotFoundError:
        return 0
    with it:
        return sum(entry.stat().st_blocks * 512 for entry in it)


def objects_bytes(session_dir: str) -> int:
    """Disk space the session's git object store and `kept/` take, a file linked into both
    counted once. Symlinks are not followed (a run may plant them in its store)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for top in (layout.OBJECTS, layout.KEPT):
        for root, _dirs, files in os.walk(os.path.join(session_dir, top)):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except FileNotFoundError:
                    continue  # (a gc inside removed it meanwhile)
                if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def cp_root(data_dir: str) -> str:
    """Where the checkpoints' saved data files are, by epoch, beside the data files."""
    return os.path.join(os.path.dirname(data_dir), layout.CHECKPOINTS)


def epochs_on_disk(root: str) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(root) if n.isdigit())
    except FileNotFoundError:
        return []


def saved_bytes(root: str) -> int:
    """Disk space the saved data files take."""
    total = 0
    for e in epochs_on_disk(root):
        with os.scandir(os.path.join(root, str(e))) as it:
            total += sum(entry.stat(follow_symlinks=False).st_blocks * 512 for entry in it)
    return total


def live_bytes(conn: apsw.Connection) -> int:
    """The bytes of delta.db in use (its size less its free pages)."""
    pages, free, size = (
        schema.pragma(conn, p) for p in ("page_count", "freelist_count", "page_size")
    )
    return (pages - free) * size


def bytes_by_kind(conn: apsw.Connection, data_dir: str, data_bytes: int) -> Bytes:
    sizes: dict[str, int] = {}
    for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        sizes[str(name)] = int(size)
    free = schema.pragma(conn, "freelist_count") * schema.pragma(conn, "page_size")
    log = sum(v for k, v in sizes.items() if k in LOG_TABLES)
    cp_rows = sum(
        v
        for k, v in sizes.items()
        if k in CHECKPOINT_TABLES or k.startswith(("cp_", "sqlite_autoindex_cp_"))
    )
    files = sum(sizes.values()) - log - cp_rows
    cps = cp_rows + saved_bytes(cp_root(data_dir))
    return Bytes(files + data_bytes, cps, log, free)


def last_event_ns(conn: apsw.Connection) -> int | None:
    return optional_integer(scalar(conn, "SELECT max(time_ns) FROM events"))
