"""Reads of worktree files through their descriptors, before and after the lower watch is
in place."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE, Node
from gitsess.overlay.tree import Tree


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "f").write_bytes(b"first")
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    t = Tree(store, str(lower), set())
    try:
        yield t
    finally:
        t.close()
        store.close()


def _replace(path: Path, content: bytes) -> None:
    aside = path.with_name(path.name + ".new")
    aside.write_bytes(content)
    os.rename(aside, path)


def _file(tree: Tree) -> Node:
    n = tree.lookup(ROOT_INODE, b"f")
    assert n is not None
    return n


def test_unwatched_a_read_follows_what_the_path_names(tree: Tree) -> None:
    path = Path(os.fsdecode(tree.root)) / "f"
    n = _file(tree)
    fd = tree.worktree_fd(n)
    assert fd is not None
    assert tree.read(n, 0, 100) == b"first"
    # still open: a READ spliced from it is read after its handler returned
    assert os.pread(fd, 100, 0) == b"first"
    assert tree.worktree_fd(n) == fd
    path.write_bytes(b"in place")
    assert tree.read(n, 0, 100) == b"in place"
    _replace(path, b"renamed over")
    assert tree.read(n, 0, 100) == b"renamed over"
    path.unlink()
    with pytest.raises(FileNotFoundError):
        tree.read(n, 0, 100)


def test_watched_the_descriptor_is_kept_until_the_watch_reports_the_path(tree: Tree) -> None:
    path = Path(os.fsdecode(tree.root)) / "f"
    n = _file(tree)
    tree.catch_up()
    assert tree.read(n, 0, 100) == b"first"
    _replace(path, b"second")
    assert tree.read(n, 0, 100) == b"first"  # no report yet: the file the read began with
    tree.stale_caches({b"f"})
    assert tree.read(n, 0, 100) == b"second"
