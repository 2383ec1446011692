"""Data files beside delta.db: tidied after a crash, copied for a fork with their holes, counted
by what they take."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitsess.overlay.content_store import INLINE_MAX
from gitsess.overlay.delta import FIRST_ALLOCATED_INO, DeltaStore, copy_data
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree
from gitsess.overlay.usage import data_bytes


def test_copy_keeps_content_and_holes(tmp_path: Path) -> None:
    src, dest = tmp_path / "a" / "delta.db", tmp_path / "b" / "delta.db"
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    sparse = tmp_path / "a" / "data" / "17"
    with open(sparse, "wb") as f:
        f.write(b"head")
        f.seek(3 * 1024**3)
        f.write(b"tail")
    (tmp_path / "a" / "data" / "18").write_bytes(b"")
    copy_data(str(src), str(dest))
    copied = tmp_path / "b" / "data" / "17"
    assert copied.stat().st_size == 3 * 1024**3 + 4
    assert copied.stat().st_blocks * 512 < 1024**2
    with open(copied, "rb") as f:
        assert f.read(4) == b"head"
        f.seek(2 * 1024**3)
        assert f.read(4) == bytes(4)
        f.seek(3 * 1024**3)
        assert f.read() == b"tail"
    assert (tmp_path / "b" / "data" / "18").read_bytes() == b""
    assert data_bytes(str(dest)) == data_bytes(str(src)) < 1024**2
    assert os.stat(tmp_path / "b" / "data").st_mode & 0o777 == 0o700


def test_no_data_files_is_nothing_to_copy(tmp_path: Path) -> None:
    copy_data(str(tmp_path / "a" / "delta.db"), str(tmp_path / "b" / "delta.db"))
    assert not (tmp_path / "b").exists()
    assert data_bytes(str(tmp_path / "a" / "delta.db")) == 0


def test_load_after_a_crash_tidies_data_files(tmp_path: Path) -> None:
    lower = tmp_path / "lower"
    lower.mkdir()
    delta = str(tmp_path / "session" / "delta.db")
    os.makedirs(os.path.dirname(delta))
    store = DeltaStore(delta)
    tree = Tree(store, str(lower), set())
    n = tree.create(ROOT_INODE, b"f", stat.S_IFREG | 0o644, 0, 0)
    committed = b"c" * (INLINE_MAX + 1)  # big enough for a data file
    tree.write(n, 0, committed)
    small = tree.create(ROOT_INODE, b"small", stat.S_IFREG | 0o644, 0, 0)
    tree.write(small, 0, b"inline")
    tree.commit(durable=True)
    # What a crash leaves: bytes written after the last commit, a file no node reads, and the
    # data file of an inline file that was growing out of delta.db.
    tree.write(n, len(committed), b" and lost")
    tree.write(small, 0, b"x" * INLINE_MAX * 2)
    tree.close()
    store.close()
    (tmp_path / "session" / "data" / "999").write_bytes(b"stray")
    store = DeltaStore(delta)
    try:
        tree = Tree(store, str(lower), set())
        # a stray of no node goes in a thread of the daemon's, once the view is served; that
        # of the inline file at once, as the file may move there again any time
        assert sorted(os.listdir(tmp_path / "session" / "data")) == sorted([str(n.ino), "999"])
        tree.remove_stray_data()
        assert sorted(os.listdir(tmp_path / "session" / "data")) == [str(n.ino)]
        again = tree.node(n.ino)
        assert tree.read(again, 0, len(committed) + 100) == committed
        tree.truncate(again, len(committed) + 11)  # what was cut must come back as zeros
        assert tree.read(again, 0, len(committed) + 100) == committed + bytes(11)
        assert tree.read(tree.node(small.ino), 0, 100) == b"inline"
        tree.close()
    finally:
        store.close()


@contextmanager
def _delta_over(lower: Path) -> Iterator[DeltaStore]:
    """A fresh delta.db beside `lower` (an empty directory made here), closed afterwards."""
    lower.mkdir()
    delta = lower.parent / "session" / "delta.db"
    delta.parent.mkdir()
    store = DeltaStore(str(delta))
    try:
        yield store
    finally:
        store.close()


def test_a_number_freed_in_this_commit_is_not_taken_again(tmp_path: Path) -> None:
    # Two worktree names for one inode: after the session deleted its copy of one, the other
    # must not get the same number while that deletion (and its bytes) is still to be written.
    lower = tmp_path / "lower"
    with _delta_over(lower) as store:
        (lower / "a").write_bytes(b"lower\n")
        os.link(lower / "a", lower / "b")
        tree = Tree(store, str(lower), set())
        a = tree.lookup(ROOT_INODE, b"a")
        assert a is not None
        tree.write(a, 0, b"A")
        tree.unlink(ROOT_INODE, b"a")
        tree.forget(a.ino, 1)
        b = tree.lookup(ROOT_INODE, b"b")
        assert b is not None and b.ino != a.ino
        tree.write(b, 0, b"B")
        tree.commit(durable=True)
        assert tree.read(b, 0, 100) == b"Bower\n"
        tree.close()
        tree = Tree(store, str(lower), set())
        again = tree.resolve(b"b")
        assert again is not None and tree.read(again, 0, 100) == b"Bower\n"
        tree.close()


def test_a_deleted_file_s_data_file_goes_with_the_commit(tmp_path: Path) -> None:
    lower = tmp_path / "lower"
    with _delta_over(lower) as store:
        tree = Tree(store, str(lower), set())
        big = tree.create(ROOT_INODE, b"big", 0o100644, 0, 0)
        small = tree.create(ROOT_INODE, b"small", 0o100644, 0, 0)
        tree.write(big, 0, b"x" * (INLINE_MAX + 1))
        tree.write(small, 0, b"y")
        tree.commit(durable=True)
        assert os.path.exists(store.data_path(big.ino))
        for name, node in ((b"big", big), (b"small", small)):
            tree.unlink(ROOT_INODE, name)
            tree.forget(node.ino, 1)
        assert os.path.exists(store.data_path(big.ino))  # until the deletion is committed
        tree.commit(durable=True)
        assert not os.path.exists(store.data_path(big.ino))
        tree.close()


def test_a_stray_data_file_s_number_is_taken_until_it_is_removed(tmp_path: Path) -> None:
    # A stray data file, removed in a thread meanwhile, would take the bytes of a node given
    # its number along: a worktree file's (which shows, and keeps when the session copies it,
    # its own inode number) or a new file's (a crash can leave a data file of a number it had
    # not recorded as used yet).
    lower = tmp_path / "lower"
    with _delta_over(lower) as store:
        (lower / "f").write_bytes(b"lower\n")
        numbers = os.lstat(lower / "f").st_ino, FIRST_ALLOCATED_INO
        os.makedirs(store.data_dir, exist_ok=True)
        for number in numbers:
            with open(store.data_path(number), "wb") as stray:
                stray.write(b"left by a crash")
        tree = Tree(store, str(lower), set())
        f = tree.lookup(ROOT_INODE, b"f")
        new = tree.create(ROOT_INODE, b"new", stat.S_IFREG | 0o644, 0, 0)
        assert f is not None and f.ino not in numbers and new.ino not in numbers
        for n in (f, new):
            tree.write(n, 0, b"x" * (INLINE_MAX + 1))
        tree.commit(durable=True)
        tree.remove_stray_data()
        assert sorted(os.listdir(store.data_dir)) == sorted([str(f.ino), str(new.ino)])
        tree.close()
        tree = Tree(store, str(lower), set())
        for name in (b"f", b"new"):
            again = tree.resolve(name)
            assert again is not None and tree.read(again, 0, 10) == b"x" * 10
        assert tree.lookup(ROOT_INODE, b"f") is tree.resolve(b"f")
        tree.close()


def test_orphans_leave_the_delta_at_load_and_their_data_as_strays(tmp_path: Path) -> None:
    # What a daemon stopped with deleted files still open leaves: nodes no name reaches.
    lower = tmp_path / "lower"
    with _delta_over(lower) as store:
        tree = Tree(store, str(lower), set())
        held = []
        for i in range(3):
            n = tree.create(ROOT_INODE, b"f%d" % i, stat.S_IFREG | 0o644, 0, 0)
            tree.write(n, 0, b"x" * (INLINE_MAX + 1))
            tree.opened(n)
            tree.unlink(ROOT_INODE, b"f%d" % i)
            held.append(n.ino)
        tree.commit(durable=True)
        tree.close()
        tree = Tree(store, str(lower), set())
        rows = store.conn.execute("SELECT count(*) FROM nodes WHERE ino >= ?", (min(held),))
        assert rows.fetchall()[0][0] == 0
        assert sorted(os.listdir(store.data_dir)) == sorted(map(str, held))
        tree.remove_stray_data()
        assert os.listdir(store.data_dir) == []
        tree.close()
