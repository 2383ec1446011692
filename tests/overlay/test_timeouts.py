"""How long the kernel may keep what the daemon tells it: long once the lower watch is in
place (changes are invalidated explicitly), a second before that and after it ended (nothing
would tell it)."""

from __future__ import annotations

import os
from pathlib import Path

import pyfuse3
import trio

from gitsess.overlay import fs
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree


def _timeouts(filesystem: fs.Filesystem, name: bytes) -> tuple[float, float]:
    async def look() -> pyfuse3.EntryAttributes:
        ctx = pyfuse3.RequestContext()
        return await filesystem.lookup(pyfuse3.InodeT(ROOT_INODE), pyfuse3.FileNameT(name), ctx)

    e = trio.run(look)
    return e.entry_timeout, e.attr_timeout


def test_entries_are_cached_briefly_until_the_watch_is_in_place(tmp_path: Path) -> None:
    lower = tmp_path / "lower"
    (lower / "dir").mkdir(parents=True)
    (lower / "file").write_text("x\n")
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    try:
        tree = Tree(store, str(lower), set())
        filesystem = fs.Filesystem(tree)
        for name in (b"dir", b"file", b"missing"):
            assert _timeouts(filesystem, name)[0] == fs.GIT_TIMEOUT, name
        tree.catch_up()
        assert _timeouts(filesystem, b"dir") == (fs.TIMEOUT, fs.TIMEOUT)
        assert _timeouts(filesystem, b"file") == (fs.TIMEOUT, fs.TIMEOUT)
        assert _timeouts(filesystem, b"missing")[0] == fs.TIMEOUT
        # The watch ended: what the kernel holds is to be asked again, and kept a second.
        entries, inodes = tree.lose_watch()
        held = tree.resolve(b"file")
        assert held is not None and held.ino in inodes and (ROOT_INODE, b"file") in entries
        for name in (b"dir", b"file", b"missing"):
            assert _timeouts(filesystem, name)[0] == fs.GIT_TIMEOUT, name
        tree.close()
    finally:
        store.close()


def test_a_directory_of_the_sessions_own_below_git_keeps_its_name(tmp_path: Path) -> None:
    """git inside makes directories below `.git` (`refs/heads/topic`): their names are the
    session's own, so the kernel keeps them as long as any; the real names below `.git` still
    follow git outside within a second."""
    lower = tmp_path / "lower"
    (lower / ".git" / "refs" / "ab").mkdir(parents=True)
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    try:
        tree = Tree(store, str(lower), set())
        tree.catch_up()
        filesystem = fs.Filesystem(tree)
        refs = tree.resolve(b".git/refs")
        assert refs is not None
        made = tree.mkdir(refs.ino, b"9c", 0o755, os.getuid(), os.getgid())

        async def look(name: bytes) -> pyfuse3.EntryAttributes:
            ctx = pyfuse3.RequestContext()
            parent = pyfuse3.InodeT(refs.ino)
            return await filesystem.lookup(parent, pyfuse3.FileNameT(name), ctx)

        own = trio.run(look, b"9c")
        assert own.st_ino == made.ino
        assert own.entry_timeout == fs.TIMEOUT
        real = trio.run(look, b"ab")
        assert (real.entry_timeout, real.attr_timeout) == (fs.GIT_TIMEOUT, fs.GIT_TIMEOUT)
        tree.close()
    finally:
        store.close()
