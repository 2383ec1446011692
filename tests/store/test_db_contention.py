"""SQLite under contention from other processes: every open waits its turn instead of failing
with "database is locked"."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

from gitsess.overlay import schema
from gitsess.store import db

ROUNDS = 30
PROCESSES = 8
_fork = multiprocessing.get_context("fork")


def _create(path: Path, start: Barrier) -> None:
    start.wait()
    db.connect(path).close()


def test_processes_creating_one_database_at_once_all_open_it(tmp_path: Path) -> None:
    # Switching a new database to WAL does not wait on the busy timeout: without retrying,
    # about one round in eight failed.
    for n in range(ROUNDS):
        start = _fork.Barrier(PROCESSES)
        procs = [
            _fork.Process(target=_create, args=(tmp_path / f"{n}.db", start))
            for _ in range(PROCESSES)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert [p.exitcode for p in procs] == [0] * PROCESSES, f"round {n}"
        assert db.connect(tmp_path / f"{n}.db").execute("PRAGMA journal_mode").get == "wal"


def _commit_and_close(path: str, stop: Event) -> None:
    while not stop.is_set():
        conn = schema.connect(path)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO meta VALUES ('k', 'v') ON CONFLICT DO NOTHING")
        conn.execute("COMMIT")
        conn.close()


def test_readers_open_a_delta_while_its_writer_commits_and_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "delta.db")
    schema.connect(path).close()
    stop = _fork.Event()
    writers = [_fork.Process(target=_commit_and_close, args=(path, stop)) for _ in range(2)]
    for w in writers:
        w.start()
    opened = 0
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            conn = schema.connect(path, readonly=True)
            conn.execute("SELECT count(*) FROM nodes").fetchall()
            conn.close()
            opened += 1
    finally:
        stop.set()
        for w in writers:
            w.join(30)
    assert [w.exitcode for w in writers] == [0, 0]
    assert opened > 100
