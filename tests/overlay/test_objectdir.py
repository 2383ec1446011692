"""A session's object store on disk (`overlay/objectdir.py`): made beside delta.db, shown in
the view as a symlink, read without following what a run planted, and a store kept as rows
(a session from before, or one that replaced its store by a directory) moved into it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitsess.overlay import objectdir
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.tree import Tree

LOOSE = "ab" + "0" * 38


@contextmanager
def _tree(tmp_path: Path) -> Iterator[Tree]:
    """A writer's tree over a worktree with a `.git/objects`, closed after."""
    (tmp_path / "lower" / ".git" / "objects" / "pack").mkdir(parents=True, exist_ok=True)
    (tmp_path / "session").mkdir(exist_ok=True)
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    try:
        tree = Tree(store, str(tmp_path / "lower"), set())
        try:
            yield tree
        finally:
            tree.close()
    finally:
        store.close()


def test_prepare_makes_the_store_once_and_follows_the_real_one(tmp_path: Path) -> None:
    session = os.fsencode(tmp_path)
    link = objectdir.prepare(session, b"/real/objects")
    store = tmp_path / "objects"
    assert os.readlink(link) == os.fsencode(store)
    assert (store / "pack").is_dir() and (store / "info").is_dir()
    lower = tmp_path / "lower" / "objects"
    assert (store / "info" / "alternates").read_bytes() == os.fsencode(lower) + b"\n"
    assert os.readlink(lower) == "/real/objects"
    made = (store / "info" / "alternates").stat().st_mtime_ns, lower.lstat().st_ino
    objectdir.prepare(session, b"/real/objects")
    assert ((store / "info" / "alternates").stat().st_mtime_ns, lower.lstat().st_ino) == made
    objectdir.prepare(session, b"/moved/objects")
    assert os.readlink(lower) == "/moved/objects"


def test_the_view_shows_the_store_as_a_symlink(tmp_path: Path) -> None:
    with _tree(tmp_path) as tree:
        git = tree.resolve(b".git")
        assert git is not None
        n = tree.find(git.ino, b"objects")
        assert n is not None and stat.S_ISLNK(tree.getattr(n).mode)
        assert tree.readlink(n) == os.fsencode(tmp_path / "session" / "objects")
        assert (b"objects", False) in list(tree.table.children(git))


def test_a_store_kept_as_rows_is_moved_into_the_store(tmp_path: Path) -> None:
    """A session whose view held its object store as a directory of its own (made before, or
    by `rm .git/objects && mkdir .git/objects` inside) gets its files into its store and the
    symlink back when a writer loads it."""
    with _tree(tmp_path) as tree:
        git = tree.resolve(b".git")
        assert git is not None
        tree.unlink(git.ino, b"objects")
        own = tree.mkdir(git.ino, b"objects", stat.S_IFDIR | 0o755, os.getuid(), os.getgid())
        fan = tree.mkdir(own.ino, b"ab", stat.S_IFDIR | 0o755, os.getuid(), os.getgid())
        mode = stat.S_IFREG | 0o444
        made = tree.create(fan.ino, LOOSE[2:].encode(), mode, os.getuid(), os.getgid())
        tree.write(made, 0, b"zlib bytes")
        tree.save()
    with _tree(tmp_path) as tree:
        moved = tmp_path / "session" / "objects" / "ab" / LOOSE[2:]
        assert moved.read_bytes() == b"zlib bytes"
        assert stat.S_IMODE(moved.stat().st_mode) == 0o444
        git = tree.resolve(b".git")
        assert git is not None
        n = tree.find(git.ino, b"objects")
        assert n is not None and stat.S_ISLNK(tree.getattr(n).mode)
        tree.save()
    with _tree(tmp_path) as tree:
        git = tree.resolve(b".git")
        assert git is not None and b"objects" not in (git.entries or {})


def test_the_stores_files_are_read_without_following_links(tmp_path: Path) -> None:
    objectdir.prepare(os.fsencode(tmp_path), os.fsencode(tmp_path / "real"))
    store = tmp_path / "objects"
    secret = tmp_path / "secret"
    secret.write_bytes(b"not the session's")
    (store / "ab").mkdir()
    (store / "ab" / LOOSE[2:]).symlink_to(secret)
    (store / "cd").mkdir()
    (store / "cd" / ("1" * 38)).write_bytes(b"own")
    (store / "pack" / "pack-1.idx").symlink_to(secret)
    (store / "pack" / "pack-1.pack").write_bytes(b"pack")
    files = objectdir.ObjectDir(os.fsencode(store))
    assert files.read_object_file(f"ab/{LOOSE[2:]}") is None
    assert files.read_object_file("cd/" + "1" * 38) == b"own"
    assert files.read_object_file("pack/pack-1.idx") is None
    assert files.own_loose_objects() == ["cd" + "1" * 38]  # (a symlink is no object)
