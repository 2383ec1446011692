"""POSIX name and path limits: a view answers every call as the filesystem below it does.

The same table of calls runs on a plain directory and in a view, and every call must give the
same result or errno: each call on names of 255 bytes (ext4's NAME_MAX) and 256 bytes, in a
worktree directory the session never touched (`l`), one it changed and holds a whiteout of a
255-byte name in (`m`), and one it made (`u`); both near the root and below a chain of
directories that brings the path to 4,094-4,095 bytes (PATH_MAX is 4,096 with the NUL).
Paths are relative to the current directory, as a client deep inside a tree uses them: joined
to the worktree's absolute path they no longer fit in one system call.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitsess.overlay import protocol
from tests.live_util import eventually
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse

LONG = "n" * 255
TOO_LONG = "n" * 256
GONE = "w" * 255  # in the worktree, removed in the session: a whiteout
ABSENT = "a" * 255
NAMES = {LONG: "255", ABSENT: "255 absent", GONE: "255 whiteout", TOO_LONG: "256"}
# The longest path one call takes, without its NUL.
PATH_LEN = 4095


def chain(length: int) -> str:
    """A relative path of directories, `length` bytes long, of names of 100 bytes or so."""
    parts = []
    while length > 201:
        parts.append("k" * 100)
        length -= 101
    parts.append("k" * length)
    return "/".join(parts)


# Each case has a directory of its own, `cNNN`, near the root or at the end of DEEP.
DEEP = chain(PATH_LEN - len("/cNNN/l/") - len(TOO_LONG))
# A symlink's target as long as a path can be.
FAR_TARGET = "t" * PATH_LEN


def _put(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1000)
    finally:
        os.close(fd)


def _write(path: str) -> int:
    fd = os.open(path, os.O_WRONLY)
    try:
        return os.pwrite(fd, b"X", 0)
    finally:
        os.close(fd)


def _stat(path: str) -> tuple[int, int]:
    s = os.lstat(path)
    return stat.S_IFMT(s.st_mode), s.st_size if stat.S_ISREG(s.st_mode) else 0


def _beside(path: str, name: str) -> str:
    return f"{os.path.dirname(path)}/{name}"


def _symlink_far(path: str) -> int:
    os.symlink(FAR_TARGET, path)
    return len(os.readlink(path))


# Each call takes the path of the name under test; `s` is a file beside it.
CALLS: dict[str, Callable[[str], Any]] = {
    "stat": _stat,
    "open": _read,
    "creat": lambda p: _put(p, b"new"),
    "write": _write,
    "mkdir": os.mkdir,
    "mkfifo": os.mkfifo,
    "mknod": lambda p: os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3)),
    "link-to": lambda p: os.link(_beside(p, "s"), p),
    "link-from": lambda p: os.link(p, _beside(p, "r"), follow_symlinks=False),
    "symlink": lambda p: os.symlink("s", p),
    "symlink-far": _symlink_far,
    "rename-to": lambda p: os.rename(_beside(p, "s"), p),
    "rename-from": lambda p: os.rename(p, _beside(p, "r")),
    "rmdir": os.rmdir,
    "unlink": os.unlink,
    "chmod": lambda p: os.chmod(p, 0o600),
    "chown": lambda p: os.chown(p, 1, 1),
    "truncate": lambda p: os.truncate(p, 1),
}


def seed(d: str) -> None:
    """The worktree's directory `d`, before the session touches it."""
    if d.endswith("u"):
        os.makedirs(os.path.dirname(d))
        return
    os.makedirs(d)
    _put(f"{d}/{LONG}", b"lower\n")
    _put(f"{d}/s", b"s\n")
    if d.endswith("m"):
        _put(f"{d}/{GONE}", b"gone\n")


def session_steps(d: str) -> list[Callable[[], Any]]:
    """What the session does to `d` before the call under test (the model does it too)."""
    if d.endswith("m"):
        return [lambda: os.unlink(f"{d}/{GONE}")]
    if d.endswith("u"):
        return [
            lambda: os.mkdir(d),
            lambda: _put(f"{d}/{LONG}", b"upper\n"),
            lambda: _put(f"{d}/s", b"s\n"),
        ]
    return []


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno or 0, e.errno))


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every object below `root`, reached through directory descriptors (some paths are too
    long to name from `root`)."""
    out: dict[str, tuple[Any, ...]] = {}
    for top, dirs, files, dir_fd in os.fwalk(root):
        for name in sorted(dirs + files):
            rel = os.path.join(os.path.relpath(top, root), name)
            s = os.lstat(name, dir_fd=dir_fd)
            kind = stat.S_IFMT(s.st_mode)
            common = (kind, stat.S_IMODE(s.st_mode), s.st_uid, s.st_gid)
            if stat.S_ISDIR(s.st_mode):
                out[rel] = (*common, s.st_nlink)
            elif stat.S_ISLNK(s.st_mode):
                out[rel] = (*common, os.readlink(name, dir_fd=dir_fd))
            elif stat.S_ISREG(s.st_mode):
                fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
                try:
                    out[rel] = (*common, s.st_nlink, os.read(fd, 1 << 20))
                finally:
                    os.close(fd)
            else:
                out[rel] = (*common, s.st_rdev)
    return out


@contextlib.contextmanager
def inside(path: Path) -> Iterator[None]:
    """Relative paths from `path` on; its parent made first."""
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.chdir(path):
        yield


def test_calls_answer_as_the_filesystem_below(mounted: Mounted, tmp_path: Path) -> None:
    model_root = tmp_path / "model"
    cases = [
        (call, f"{DEEP}/c{i:03d}/{kind}" if deep else f"c{i:03d}/{kind}", name)
        for i, (call, deep, kind, name) in enumerate(
            itertools.product(CALLS, (False, True), "lmu", NAMES)
        )
    ]
    for root in (mounted.lower, model_root):
        with inside(root / "t"):
            for _, d, _ in cases:
                seed(d)
    differ = []
    for call, d, name in cases:
        got: dict[str, list[tuple[str, Any]]] = {}
        for side, root in (("view", mounted.mnt), ("model", model_root)):
            with contextlib.chdir(root / "t"):
                steps: list[Callable[[], Any]] = [
                    *session_steps(d),
                    functools.partial(CALLS[call], f"{d}/{name}"),
                ]
                got[side] = [outcome(step) for step in steps]
        where = f"{call} {'deep ' if d.startswith(DEEP) else ''}{d[-1]} {NAMES[name]}"
        if got["view"] != got["model"]:
            differ.append(f"{where}: view {got['view']} != model {got['model']}")
        if name == TOO_LONG:
            assert got["model"][-1] == ("err", "ENAMETOOLONG"), where
    assert not differ, "\n".join(differ)
    assert snapshot(mounted.mnt / "t") == snapshot(model_root / "t")


def test_statfs_gives_the_worktree_name_max(mounted: Mounted) -> None:
    assert os.statvfs(mounted.mnt).f_namemax == os.statvfs(mounted.lower).f_namemax == 255


def test_deep_worktree_changes_show_through(mounted: Mounted) -> None:
    # The directory's own absolute path in the worktree is past PATH_MAX: the watch must
    # watch it all the same, and the view read it.
    mounted.wait_watched()
    deep = chain(PATH_LEN - len("/f"))
    with inside(mounted.lower):
        os.makedirs(deep)
        _put(f"{deep}/f", b"one\n")
    assert len(str(mounted.lower / deep)) > PATH_LEN
    with contextlib.chdir(mounted.mnt):
        assert _read(f"{deep}/f") == b"one\n"
    with contextlib.chdir(mounted.lower):
        _put(f"{deep}/f", b"two, longer\n")
    with contextlib.chdir(mounted.mnt):
        assert eventually(lambda: _read(f"{deep}/f") == b"two, longer\n")
        assert os.listdir(deep) == ["f"]
    status = protocol.status(str(mounted.spec.session_dir))
    assert status is not None and status.watched


def test_view_serves_any_depth(mounted: Mounted) -> None:
    # A client walks down step by step, as far as it likes (natively a tree may be any depth):
    # each of its calls is short, the worktree paths behind them over twice PATH_MAX.
    step = chain(3000)
    with inside(mounted.lower):
        for _ in range(3):
            os.makedirs(step)
            os.chdir(step)
        _put("f", b"deep\n")
    with contextlib.chdir(mounted.mnt):
        for _ in range(3):
            os.chdir(step)
        assert _read("f") == b"deep\n"
        assert _write("f") == 1
        _put("g", b"new\n")
        assert sorted(os.listdir(".")) == ["f", "g"]
        assert (_read("f"), _read("g")) == (b"Xeep\n", b"new\n")
    with contextlib.chdir(mounted.lower):
        for _ in range(3):
            os.chdir(step)
        assert os.listdir(".") == ["f"]
        assert _read("f") == b"deep\n"
