"""Applied paths leaving the delta (`overlay/applied.py`), without a mount."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.overlay.delta import DeltaStore, drift_rows
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    lower = tmp_path / "lower"
    (lower / "dir").mkdir(parents=True)
    (lower / "README").write_text("readme\n")
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    t = Tree(store, str(lower), set())
    t.catch_up()  # the lower watch is in place
    try:
        yield t
    finally:
        t.close()
        store.close()


def test_drift_reported_just_before_a_drop_goes_with_the_dropped_paths(tree: Tree) -> None:
    """The apply writes the real worktree, then asks for the drop: the watch's report of those
    writes may reach the daemon just before the drop, uncommitted when the drop commits. (The
    drift was written after the drop's removal of it, and stayed: a session with nothing
    left at a path showed the path as drift.)"""
    lower = Path(os.fsdecode(tree.root))
    readme = tree.lookup(ROOT_INODE, b"README")
    assert readme is not None
    tree.write(readme, 0, b"changed\n")
    directory = tree.lookup(ROOT_INODE, b"dir")
    assert directory is not None
    tree.create(directory.ino, b"new", 0o100644, os.getuid(), os.getgid())
    tree.save()
    (lower / "README").write_text("changed\n")
    (lower / "dir" / "new").write_text("")
    tree.stale_caches({b"README", b"dir/new"})  # the watch's report of the apply's writes
    assert tree.has_pending
    tree.drop_applied([b"README", b"dir/new"])
    assert drift_rows(tree.store.conn, after_ns=0) == []
