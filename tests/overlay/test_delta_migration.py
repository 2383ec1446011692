"""delta.db of an older gitsess: file contents move from the `chunks` table into data files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import apsw
import pytest

from gitsess.overlay import schema
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree

CHUNK = 128 * 1024
INO = (1 << 44) + 5


def _version_2_delta(path: Path, content: bytes) -> None:
    """A delta.db as version 2 wrote it: one file `f` whose bytes sit in 128 KiB chunks, an
    all-zero chunk left out (sparse), and a size past the last chunk (a truncate extension)."""
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        for step in schema.MIGRATIONS[:2]:
            assert isinstance(step, str)
            conn.execute(step)
        conn.execute("PRAGMA user_version=2")
        conn.execute("INSERT INTO meta VALUES ('chunk_size', ?), ('next_ino', ?)", (CHUNK, INO + 1))
        columns = "ino, mode, uid, gid, atime_ns, mtime_ns, ctime_ns, origin"
        conn.execute(
            f"INSERT INTO nodes ({columns}) VALUES (?, ?, 0, 0, 0, 0, 0, X'')",
            (ROOT_INODE, stat.S_IFDIR | 0o755),
        )
        conn.execute(
            "INSERT INTO nodes (ino, mode, uid, gid, size, atime_ns, mtime_ns, ctime_ns)"
            " VALUES (?, ?, 0, 0, ?, 0, 0, 0)",
            (INO, stat.S_IFREG | 0o644, len(content) + 1000),
        )
        conn.execute("INSERT INTO dentries VALUES (?, X'66', ?)", (ROOT_INODE, INO))
        for idx in range(0, len(content), CHUNK):
            piece = content[idx : idx + CHUNK]
            if piece.count(0) != len(piece):
                conn.execute("INSERT INTO chunks VALUES (?, ?, ?)", (INO, idx // CHUNK, piece))
    finally:
        conn.close()


@pytest.mark.parametrize("readonly", [False, True])
def test_chunks_move_into_a_data_file(tmp_path: Path, readonly: bool) -> None:
    content = os.urandom(CHUNK) + bytes(CHUNK) + os.urandom(CHUNK // 2)
    delta = tmp_path / "delta.db"
    _version_2_delta(delta, content)
    lower = tmp_path / "lower"
    lower.mkdir()
    store = DeltaStore(str(delta), readonly=readonly)
    try:
        tree = Tree(store, str(lower), set(), writer=not readonly)
        n = tree.node(INO)
        assert tree.read(n, 0, 10 * CHUNK) == content + bytes(1000)
        tables = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        assert "chunks" not in tables
    finally:
        store.close()
    assert (tmp_path / "data" / str(INO)).read_bytes() == content
    conn = apsw.Connection(str(delta), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(len(schema.MIGRATIONS),)]
    finally:
        conn.close()
