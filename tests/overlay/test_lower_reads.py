"""Reads of worktree files through their descriptors, before and after the lower watch is
in place; worktree symlinks whose target the kernel keeps."""

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


def test_a_symlink_retargeted_where_no_watch_looks_gets_a_new_node(tree: Tree) -> None:
    """The kernel keeps a symlink's target until its inode is invalidated (fs.py's
    `cache_symlinks`), and nothing invalidates below `.git`: a symlink there that says
    something else when the kernel looks its name up again is a new node, read anew."""
    git = Path(os.fsdecode(tree.root)) / ".git"
    git.mkdir()
    (git / "link").symlink_to("first")
    tree.catch_up()
    parent = tree.lookup(ROOT_INODE, b".git")
    assert parent is not None
    n = tree.lookup(parent.ino, b"link")
    assert n is not None and tree.readlink(n) == b"first"
    same = tree.lookup(parent.ino, b"link")
    assert same is n  # unchanged: the kernel's inode stays
    (git / "link.new").symlink_to("second")
    os.rename(git / "link.new", git / "link")
    again = tree.lookup(parent.ino, b"link")
    assert again is not None and again.ino != n.ino
    assert tree.readlink(again) == b"second"
    # replaced by one saying the same: nothing the kernel keeps is wrong, the inode stays
    (git / "link.new").symlink_to("second")
    os.rename(git / "link.new", git / "link")
    assert tree.lookup(parent.ino, b"link") is again
