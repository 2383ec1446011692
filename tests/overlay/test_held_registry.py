"""The registry the daemon holds open while its view is mounted (`daemon._hold`), so that
readers inside a run, which cannot write its `-shm`, never see it rebuilt or deleted."""

from __future__ import annotations

from pathlib import Path

from gitsess.overlay import daemon
from gitsess.store import db


def test_the_held_registry_keeps_its_shm_past_every_other_close(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    conn = db.connect(path)
    conn.execute("CREATE TABLE t(v)")
    conn.close()
    assert not Path(f"{path}-shm").exists()  # the last close deletes it
    held = daemon._hold(str(path))
    assert held is not None
    try:
        other = db.connect(path)
        other.execute("INSERT INTO t VALUES (1)")
        other.close()
        assert Path(f"{path}-shm").exists()
    finally:
        held.close()


def test_a_registry_it_cannot_open_is_not_held_and_stops_nothing(tmp_path: Path) -> None:
    damaged = tmp_path / "sessions.db"
    damaged.write_bytes(b"not a database, " * 512)
    assert daemon._hold(str(damaged)) is None
    assert daemon._hold(str(tmp_path / "missing.db")) is None
    assert daemon._hold(None) is None
