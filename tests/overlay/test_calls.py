"""Calls checked against a plain directory on the disk the tests run on (ext4 here): each gives
the same result or errno, and leaves the same tree, which a remount keeps."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gitsess.libc import fallocate
from gitsess.overlay.content_store import INLINE_MAX
from tests.overlay.conftest import Mounted
from tests.overlay.test_model import outcome, seed_tree, snapshot
from tests.util import renameat2

pytestmark = pytest.mark.fuse

NOREPLACE, EXCHANGE, WHITEOUT = 1, 2, 4
KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE = 0x01, 0x02, 0x10


class Pair:
    """The view and its model: every call is made on both and must come out the same."""

    def __init__(self, m: Mounted, model_root: Path) -> None:
        seed_tree(m.lower / "t")
        (m.lower / "t" / "huge").write_bytes(os.urandom(3 * INLINE_MAX))
        shutil.copytree(m.lower / "t", model_root / "t", symlinks=True)
        self.m = m
        self.view, self.model = m.mnt / "t", model_root / "t"
        (self.view / "new").write_bytes(b"upper\n")
        (self.model / "new").write_bytes(b"upper\n")

    def call(self, fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
        got, want = outcome(fn, self.view, args), outcome(fn, self.model, args)
        assert got == want, f"{fn.__name__}{args}: view {got} != model {want}"
        return got

    def lstat(self, p: str) -> tuple[os.stat_result, os.stat_result]:
        return os.lstat(self.view / p), os.lstat(self.model / p)

    def same_tree(self) -> None:
        assert snapshot(self.view) == snapshot(self.model)


def _rename(root: Path, a: str, b: str, flags: int) -> None:
    renameat2(bytes(root / a), bytes(root / b), flags)


def _fallocate(root: Path, p: str, mode: int, offset: int, length: int) -> tuple[int, int]:
    fd = os.open(root / p, os.O_RDWR)
    try:
        fallocate(fd, mode, offset, length)
        st = os.fstat(fd)
        return st.st_size, st.st_blocks
    finally:
        os.close(fd)


def test_renameat2_flags_as_on_a_plain_directory(mounted: Mounted, tmp_path: Path) -> None:
    pair = Pair(mounted, tmp_path)
    for a, b, flags in (
        ("b", "moved-b", WHITEOUT),  # a worktree file
        ("new", "moved-new", WHITEOUT),  # the session's own
        ("a/d", "moved-d", WHITEOUT),  # a worktree directory, with what is in it
        ("a/c", "moved-b", WHITEOUT),  # onto a name that exists
        ("a/b", "moved-new", NOREPLACE | WHITEOUT),  # EEXIST
        ("b", "again", WHITEOUT),  # a whiteout is a file like any other
        ("nothing", "x", WHITEOUT),  # ENOENT
        ("moved-d", "a/b", WHITEOUT),  # a directory onto a file: ENOTDIR
        ("a/b", "moved-new", EXCHANGE | WHITEOUT),  # EINVAL
        ("a/b", "moved-new", EXCHANGE | NOREPLACE),  # EINVAL
        ("a/b", "moved-new", 8),  # no such flag: EINVAL
        ("a/b", "moved-new", NOREPLACE),  # EEXIST
        ("a/b", "moved-d", EXCHANGE),  # a file and a directory change places
        ("a/b", "nothing", EXCHANGE),  # ENOENT
    ):
        pair.call(_rename, a, b, flags)
    pair.same_tree()
    for name in ("a/c", "b", "again", "new", "a/d"):
        view, model = pair.lstat(name)
        assert (view.st_mode, view.st_rdev, view.st_size, view.st_uid, view.st_gid) == (
            model.st_mode,
            model.st_rdev,
            model.st_size,
            model.st_uid,
            model.st_gid,
        )
        assert stat.S_ISCHR(view.st_mode) and view.st_rdev == 0
    before = {name: pair.lstat(name) for name in ("a/b", "moved-d")}
    pair.call(_rename, "a/b", "moved-d", EXCHANGE)
    for name, (view, model) in before.items():  # both inodes changed, as on ext4
        after = pair.lstat("moved-d" if name == "a/b" else "a/b")
        assert after[0].st_ino == view.st_ino and after[0].st_ctime_ns > view.st_ctime_ns
        assert after[1].st_ino == model.st_ino and after[1].st_ctime_ns > model.st_ctime_ns
    mounted.remount()
    pair.same_tree()


def test_fallocate_as_on_a_plain_directory(mounted: Mounted, tmp_path: Path) -> None:
    pair = Pair(mounted, tmp_path)
    for p, mode, offset, length in (
        ("new", 0, 100, 50),  # an inline file, within its size
        ("a/b", 0, 4096, 20_000),  # a small worktree file, grown
        ("a/c", KEEP_SIZE, 0, 100_000),  # room beyond the end, size kept
        ("huge", PUNCH_HOLE | KEEP_SIZE, 4096, 3 * 4096),  # a worktree file's hole
        ("huge", ZERO_RANGE, 10_000, 60_000),  # zeroes, past the end
        ("a/d/c", ZERO_RANGE | KEEP_SIZE, 3, 100_000),
        ("new", PUNCH_HOLE | KEEP_SIZE, 0, 1 << 20),
        ("new", PUNCH_HOLE, 0, 10),  # EOPNOTSUPP: a hole never changes the size
        ("new", PUNCH_HOLE | ZERO_RANGE | KEEP_SIZE, 0, 10),  # EOPNOTSUPP
        ("new", 0, 0, 0),  # EINVAL
        ("a", 0, 0, 10),  # a directory: EISDIR
    ):
        before = [st.st_mtime_ns for st in pair.lstat(p)]
        if pair.call(_fallocate, p, mode, offset, length)[0] == "ok":
            after = [st.st_mtime_ns for st in pair.lstat(p)]
            assert after[0] > before[0] and after[1] > before[1]  # both changed, as on ext4
    for p in ("new", "a/b", "a/c", "huge", "a/d/c"):
        view, model = pair.lstat(p)
        # data files: blocks as the model's (holes take none, room kept beyond the end counts)
        assert (view.st_size, view.st_blocks) == (model.st_size, model.st_blocks), p
    pair.same_tree()
    mounted.remount()
    pair.same_tree()
    assert (mounted.lower / "t" / "huge").read_bytes()[4096:4100] != bytes(4)  # the worktree's


def test_a_new_directory_is_one_block(mounted: Mounted, tmp_path: Path) -> None:
    pair = Pair(mounted, tmp_path)
    pair.call(lambda root: os.mkdir(root / "made"))
    assert [st.st_size for st in pair.lstat("made")] == [4096, 4096]
    assert [st.st_size for st in pair.lstat("a")] == [4096, 4096]
    mounted.remount()
    assert os.lstat(pair.view / "made").st_size == 4096
