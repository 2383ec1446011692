"""What a delta keeps of its audit log, and where its bytes go."""

from __future__ import annotations

import json
import os
from pathlib import Path

import apsw

from gitsess.overlay import retention, usage
from gitsess.overlay.delta import DeltaStore


def _store(tmp_path: Path) -> DeltaStore:
    (tmp_path / "s").mkdir()
    return DeltaStore(str(tmp_path / "s" / "delta.db"))


def _log(store: DeltaStore, events: list[tuple[int, str, int, int]]) -> None:
    """Events as the daemon writes them: (time_ns, op, bytes, run_id)."""
    with store.conn:
        store.conn.execute(
            "INSERT INTO processes (id, pid, name, cmdline) VALUES (1, 7, 'sh', 'sh')"
        )
        store.conn.executemany(
            "INSERT INTO events (time_ns, op, path, bytes, pid, process, run_id)"
            " VALUES (?, ?, 'f', ?, 7, 1, ?)",
            events,
        )


def _fill_checkpointed(store: DeltaStore, events: int) -> None:
    """`events` events of long paths (200 bytes), all in delta.db itself."""
    with store.conn:
        store.conn.executemany(
            "INSERT INTO events (time_ns, op, path, bytes, run_id) VALUES (?, 'write', ?, 10, 1)",
            ((t, f"{t:0200d}") for t in range(events)),
        )
    store.checkpoint()


def test_trim_keeps_the_newest_and_summarises_the_runs_it_drops(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _log(store, [(t, "write" if t % 2 else "create", 10, 1 + t // 50) for t in range(100)])
    assert retention.trim_log(store.conn, 30, 0) == 70
    ids = store.conn.execute("SELECT min(time_ns), count(*) FROM events").fetchall()[0]
    assert ids == (70, 30)
    summaries = {
        r[0]: r[1:]
        for r in store.conn.execute(
            "SELECT run_id, events, first_ns, last_ns, bytes, ops FROM run_summaries"
        )
    }
    assert summaries[1] == (50, 0, 49, 500, json.dumps({"create": 25, "write": 25}))
    assert summaries[2][:4] == (20, 50, 69, 200)
    # Again, by age: the summary of run 2 grows, nothing is counted twice.
    assert retention.trim_log(store.conn, 1000, 80) == 10
    row = store.conn.execute("SELECT events, last_ns FROM run_summaries WHERE run_id = 2")
    assert row.fetchall() == [(30, 79)]
    assert retention.trim_log(store.conn, 1000, 0) == 0
    assert retention.summaries(store.conn)[2].events == 30
    store.close()


def test_trim_keeps_the_processes_a_live_daemon_refers_to(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _log(store, [(t, "write", 10, 1) for t in range(10)])
    assert retention.trim_log(store.conn, 0, 0, keep_processes={1}) == 10
    assert store.conn.execute("SELECT id FROM processes").fetchall() == [(1,)]
    store.conn.execute(
        "INSERT INTO events (time_ns, op, path, pid, process) VALUES (20, 'write', 'f', 7, 1)"
    )
    # offline (no daemon knows it): a process goes with its last event
    assert retention.trim_log(store.conn, 0, 0) == 1
    assert store.conn.execute("SELECT id FROM processes").fetchall() == []
    store.close()


def test_a_big_log_is_given_back_to_the_disk(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _log(store, [(t, "write", 10, 1) for t in range(200_000)])
    before = usage.bytes_by_kind(store.conn, store.data_dir, 0)
    assert before.log_bytes > 5_000_000
    retention.trim_log(store.conn, 1000, 0)
    assert store.shrink()
    after = usage.bytes_by_kind(store.conn, store.data_dir, 0)
    assert after.log_bytes < before.log_bytes / 50
    assert os.path.getsize(store.path) < before.log_bytes / 4
    store.close()


def test_after_a_trim_free_pages_go_back_below_a_quarter_too(tmp_path: Path) -> None:
    # A trim frees pages on purpose: gc gives them back even when they are fewer than the
    # quarter of delta.db the commit loop waits for, and truncates the WAL that held the trim.
    store = _store(tmp_path)
    _fill_checkpointed(store, 120_000)
    retention.trim_log(store.conn, 96_000, 0)
    free = store.conn.execute("PRAGMA freelist_count").fetchall()[0][0]
    pages = store.conn.execute("PRAGMA page_count").fetchall()[0][0]
    assert isinstance(free, int) and isinstance(pages, int)
    assert free >= 1024 and free * 4 < pages
    assert not store.shrink()
    assert os.path.getsize(store.path + "-wal") > 0
    assert store.shrink(eager=True)
    assert store.conn.execute("PRAGMA freelist_count").fetchall()[0][0] == 0
    assert os.path.getsize(store.path + "-wal") == 0
    store.close()


def test_a_shrink_a_reader_held_up_is_finished_at_the_next_look(tmp_path: Path) -> None:
    """delta.db is cut to its new size only by a checkpoint that copied all of the WAL; one a
    reader's snapshot stopped is tried again by the next shrink, though no commit followed
    (seen: an idle daemon kept an emptied delta.db at full size)."""
    store = _store(tmp_path)
    _fill_checkpointed(store, 60_000)
    full = os.path.getsize(store.path)
    retention.trim_log(store.conn, 0, 0)
    reader = apsw.Connection(store.path, flags=apsw.SQLITE_OPEN_READONLY)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM events").fetchall()  # its snapshot: before the trim
    store.conn.set_busy_timeout(50)
    assert store.shrink()
    assert os.path.getsize(store.path) == full
    assert not store.shrink()  # the reader still reads
    assert os.path.getsize(store.path) == full
    reader.execute("COMMIT")
    reader.close()
    assert not store.shrink()
    assert os.path.getsize(store.path) < full / 10
    assert os.path.getsize(store.path + "-wal") == 0
    store.close()
