"""Calls on paths too long for one system call, reached a stretch at a time as the kernel walks
them: same results and errors as walking down with chdir, and no descriptor left open."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

import pytest

from gitsess.overlay import longpath

STEP = "/".join(["d" * 200] * 15)  # 3,014 bytes


def _deep(root: Path, steps: int) -> bytes:
    """`root` with `steps` times STEP below it, made by walking down; its absolute path."""
    with contextlib.chdir(root):
        for _ in range(steps):
            os.makedirs(STEP)
            os.chdir(STEP)
        with open("f", "wb") as f:
            f.write(b"deep\n")
        os.mkdir("sub")
    return os.fsencode(root) + (b"/" + os.fsencode(STEP)) * steps


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_calls_reach_paths_of_any_length(tmp_path: Path) -> None:
    deep = _deep(tmp_path, 3)
    assert len(deep) > 2 * longpath.PATH_MAX
    fds = _open_fds()
    st = longpath.call(os.lstat, deep + b"/f")
    fd = longpath.call(os.open, deep + b"/f", os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"deep\n"
        assert os.path.samestat(os.fstat(fd), st)
    finally:
        os.close(fd)
    assert sorted(longpath.entries(deep)) == [(b"f", False), (b"sub", True)]
    assert _open_fds() == fds


@pytest.mark.parametrize(
    ("below", "code"),
    [
        (b"/missing/f", errno.ENOENT),
        (b"/f/f", errno.ENOTDIR),
        (b"/" + b"n" * 256, errno.ENAMETOOLONG),
    ],
)
def test_errors_are_the_walks(tmp_path: Path, below: bytes, code: int) -> None:
    deep = _deep(tmp_path, 2)
    fds = _open_fds()
    with pytest.raises(OSError) as failed:
        longpath.call(os.lstat, deep + below)
    assert failed.value.errno == code
    assert _open_fds() == fds


def test_a_missing_directory_on_the_way_is_enoent(tmp_path: Path) -> None:
    # The stretch that is opened, not only the last name, may be what is missing.
    deep = _deep(tmp_path, 2)
    gone = os.fsencode(tmp_path) + b"/gone" + deep[len(os.fsencode(tmp_path)) :]
    with pytest.raises(FileNotFoundError):
        longpath.call(os.lstat, gone + b"/f")
