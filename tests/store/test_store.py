from __future__ import annotations

import stat
import uuid
from pathlib import Path

import apsw
import pytest

from gitsess.errors import GitsessError
from gitsess.store import schema
from gitsess.store.db import connect, private_dir
from gitsess.store.registry import NameTaken, Registry
from gitsess.store.user_index import UserIndex, index_path


def open_registry(path: Path) -> Registry:
    registry = Registry.open(path, create=True)
    assert registry is not None
    return registry


def add(registry: Registry, name: str) -> str:
    session_id = str(uuid.uuid4())
    with registry.write():
        registry.insert(
            id=session_id,
            name=name,
            title="",
            worktree=Path("/wt"),
            branch="main",
            base_commit=None,
            read_only=False,
            parent=None,
            created_worktree=False,
            created_branch=False,
        )
    return session_id


def test_new_registry_is_migrated_wal_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "sessions.db"
    registry = open_registry(path)
    assert schema.user_version(registry.conn) == schema.VERSION
    assert registry.conn.execute("PRAGMA journal_mode").get == "wal"
    assert registry.conn.execute("PRAGMA foreign_keys").get == 1
    tables = {r[0] for r in registry.conn.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "participants", "runs"} <= tables
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_open_without_create_writes_nothing(tmp_path: Path) -> None:
    assert Registry.open(tmp_path / "state" / "sessions.db", create=False) is None
    assert not (tmp_path / "state").exists()


def test_private_dir_makes_every_missing_level_0700(tmp_path: Path) -> None:
    private_dir(tmp_path / "a" / "b" / "c")
    for level in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE((tmp_path / level).stat().st_mode) == 0o700


def test_migrations_run_once_and_only_forward(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    open_registry(path).close()
    registry = open_registry(path)  # reopening must not re-run step 1 (CREATE TABLE would fail)
    assert schema.user_version(registry.conn) == schema.VERSION
    registry.conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    registry.close()
    with pytest.raises(GitsessError, match="newer than this gitsess knows"):
        Registry.open(path, create=True)


def test_seq_follows_creation_order_and_offsets_count_back(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    ids = [add(registry, name) for name in ("a", "b", "c")]
    assert [s.seq for s in registry.all()] == [1, 2, 3]
    newest, oldest = registry.by_offset(1), registry.by_offset(3)
    assert newest is not None and newest.id == ids[2]
    assert oldest is not None and oldest.id == ids[0]
    assert registry.by_offset(4) is None


def test_names_and_ids_are_unique(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    first = add(registry, "a")
    with pytest.raises(NameTaken, match="named 'a'"):
        add(registry, "a")
    with pytest.raises(NameTaken, match=f"id {first}"), registry.write():
        registry.insert(
            id=first,
            name="other",
            title="",
            worktree=Path("/wt"),
            branch=None,
            base_commit=None,
            read_only=False,
            parent=None,
            created_worktree=False,
            created_branch=False,
        )
    assert [s.name for s in registry.all()] == ["a"]


def test_id_prefix_lookup(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    session_id = add(registry, "a")
    assert [s.name for s in registry.by_id_prefix(session_id[:6])] == ["a"]
    assert registry.by_id_prefix("zzzz") == []


def test_deleting_a_session_cascades_to_participants_and_runs(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    session_id = add(registry, "a")
    conn = registry.conn
    conn.execute(
        "INSERT INTO participants (session_id, role, kind) VALUES (?, 'main', 'shell')",
        (session_id,),
    )
    conn.execute(
        "INSERT INTO runs (session_id, command, cwd, started_at) VALUES (?, '[\"ls\"]', '/', 'x')",
        (session_id,),
    )
    with registry.write():
        registry.delete(session_id)
    assert conn.execute("SELECT count(*) FROM participants").get == 0
    assert conn.execute("SELECT count(*) FROM runs").get == 0


def test_participant_role_is_unique_per_session(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    session_id = add(registry, "a")
    sql = "INSERT INTO participants (session_id, role, kind) VALUES (?, 'main', 'shell')"
    registry.conn.execute(sql, (session_id,))
    with pytest.raises(apsw.ConstraintError):
        registry.conn.execute(sql, (session_id,))


def test_update_renames_and_refuses_a_taken_name(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "sessions.db")
    a = add(registry, "a")
    add(registry, "b")
    assert registry.update(a, name="c").name == "c"
    with pytest.raises(NameTaken):
        registry.update(a, name="b")
    assert [s.name for s in registry.all()] == ["c", "b"]


def test_corrupt_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(GitsessError, match="is corrupt"):
        Registry.open(path, create=True)


def test_connections_wait_for_a_writer_instead_of_failing(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    open_registry(path).close()
    other = connect(path)
    other.set_busy_timeout(0)
    registry = open_registry(path)
    with registry.write(), pytest.raises(apsw.BusyError):
        other.execute("BEGIN IMMEDIATE")
    other.execute("BEGIN IMMEDIATE")  # free again once the writer committed
    other.execute("ROLLBACK")


def test_user_index_location_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert index_path() == tmp_path / "xdg" / "gitsess" / "index.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert index_path() == tmp_path / "home" / ".local" / "state" / "gitsess" / "index.db"


def test_user_index_adds_once_and_discards(tmp_path: Path) -> None:
    index = UserIndex(tmp_path / "idx" / "index.db")
    assert index.repos() == []
    index.add(Path("/r/.git/gitsess"), Path("/r/.git"))
    index.add(Path("/r/.git/gitsess"), Path("/r/.git"))
    index.add(Path("/a/.git/gitsess"), Path("/a/.git"))
    assert index.repos() == [
        (Path("/a/.git/gitsess"), Path("/a/.git")),
        (Path("/r/.git/gitsess"), Path("/r/.git")),
    ]
    index.discard(Path("/r/.git/gitsess"))
    assert index.repos() == [(Path("/a/.git/gitsess"), Path("/a/.git"))]
    assert stat.S_IMODE((tmp_path / "idx").stat().st_mode) == 0o700
