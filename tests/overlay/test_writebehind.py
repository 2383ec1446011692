"""The disk write of a big file's data starts while it is written, not at its fsync."""

from __future__ import annotations

import fcntl
import os
import resource
import stat
import struct
import threading
from pathlib import Path

import pytest

from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree
from gitsess.overlay.writebehind import EVERY, WriteBehind
from tests.live_util import eventually

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_EXTENT_DELALLOC = 0x4
_HEADER, _EXTENT = 32, 56


def _delalloc_bytes(target: Path | int) -> int:
    """Bytes of a file (a path or an open descriptor) that have no place on disk yet."""
    count = 512
    buf = bytearray(struct.pack("=QQLLLL", 0, 2**64 - 1, 0, 0, count, 0) + bytes(_EXTENT * count))
    if isinstance(target, int):
        fcntl.ioctl(target, _FS_IOC_FIEMAP, buf)
    else:
        with open(target, "rb") as f:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, buf)
    (mapped,) = struct.unpack_from("=L", buf, 20)
    total = 0
    for i in range(mapped):
        _, _, length = struct.unpack_from("=QQQ", buf, _HEADER + i * _EXTENT)
        (flags,) = struct.unpack_from("=L", buf, _HEADER + i * _EXTENT + 40)
        if flags & _FIEMAP_EXTENT_DELALLOC:
            total += length
    return total


def _write(fd: int, nbytes: int, wb: WriteBehind | None = None, key: int = 1) -> None:
    block = os.urandom(1 << 20)
    for off in range(0, nbytes, len(block)):
        os.pwrite(fd, block, off)
        if wb is not None:
            wb.wrote(key, fd, len(block))


@pytest.fixture
def delalloc_dir(tmp_path: Path) -> Path:
    """`tmp_path`, if its filesystem holds written data back (ext4's delayed allocation)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        _write(fd, 1 << 20)
        held = _delalloc_bytes(probe)
    except OSError as e:
        pytest.skip(f"no FIEMAP here: {e}")
    finally:
        os.close(fd)
        probe.unlink()
    if not held:
        pytest.skip("nothing held back: a filesystem that allocates at write time, or a sync")
    return tmp_path


@pytest.fixture
def control(delalloc_dir: Path) -> Path:
    """A file written, never started: while it is still held back, nothing (another test's
    `sync`) has written out every file, and what a test finds held back was its own doing."""
    path = delalloc_dir / "control"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        _write(fd, 1 << 20)
    finally:
        os.close(fd)
    return path


def _held_back(target: Path | int, control: Path) -> int:
    held = _delalloc_bytes(target)
    if not _delalloc_bytes(control):
        pytest.skip("everything was written out meanwhile (a sync elsewhere): nothing to judge")
    return held


def _writers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "write-behind"}


def test_every_so_many_bytes_the_disk_write_starts(delalloc_dir: Path, control: Path) -> None:
    # (another test's view in this worker may still be stopping its own thread)
    others = _writers()
    wb = WriteBehind()
    big, small = delalloc_dir / "big", delalloc_dir / "small"
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT, 0o600) for p in (big, small)]
    try:
        _write(fds[0], 2 * EVERY, wb, key=1)
        _write(fds[1], EVERY // 2, wb, key=2)
    finally:
        for fd in fds:
            os.close(fd)  # before the thread got to them: it works on duplicates
        wb.close()
    assert _delalloc_bytes(big) == 0
    assert _held_back(small, control) == EVERY // 2
    assert _writers() <= others


def test_a_forgotten_file_counts_again(delalloc_dir: Path, control: Path) -> None:
    wb = WriteBehind()
    path = delalloc_dir / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        _write(fd, EVERY // 2, wb)
        wb.forget(1)
        os.pwrite(fd, os.urandom(EVERY // 2), EVERY // 2)
        wb.wrote(1, fd, EVERY // 2)
    finally:
        os.close(fd)
        wb.close()
    assert _held_back(path, control) == EVERY


def test_a_big_file_written_into_a_session_goes_to_the_disk_as_it_comes(
    delalloc_dir: Path,
) -> None:
    lower = delalloc_dir / "lower"
    lower.mkdir()
    session = delalloc_dir / "session"
    session.mkdir()
    store = DeltaStore(str(session / "delta.db"))
    try:
        tree = Tree(store, str(lower), set())
        try:
            n = tree.create(ROOT_INODE, b"big", stat.S_IFREG | 0o644, 0, 0)
            block = os.urandom(1 << 20)
            tree.write(n, 0, block)
            # Looked at through a descriptor kept open: ext4 starts the write of a file that
            # was truncated to nothing (as a new data file is) at the close of any of its.
            probe = os.open(session / "data" / str(n.ino), os.O_RDONLY)
            try:
                for off in range(len(block), 3 * EVERY, len(block)):
                    tree.write(n, off, block)
                assert eventually(lambda: _delalloc_bytes(probe) == 0, timeout=10)
            finally:
                os.close(probe)
        finally:
            tree.close()
    finally:
        store.close()


def test_out_of_descriptors_the_write_stands_without_its_early_start(
    delalloc_dir: Path, control: Path
) -> None:
    wb = WriteBehind()
    path = delalloc_dir / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    lowest_free = os.dup(fd)
    os.close(lowest_free)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        os.pwrite(fd, os.urandom(EVERY), 0)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        try:
            wb.wrote(1, fd, EVERY)  # would dup: no descriptor left
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert _held_back(fd, control) == EVERY
        os.pwrite(fd, os.urandom(EVERY), EVERY)
        wb.wrote(1, fd, EVERY)  # the next start is not held back by the one skipped
    finally:
        os.close(fd)
        wb.close()
    assert _delalloc_bytes(path) == 0
