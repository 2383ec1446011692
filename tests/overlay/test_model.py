"""Model check: random operation sequences on a mount and on a plain directory must agree.

Each example gets a fresh subtree written into the real worktree while the session is mounted
(so it also checks that new lower content shows through), and a plain copy of it as the model.
Every step must give the same result or errno; the trees must be identical at the end.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsess.libc import fallocate
from gitsess.overlay.content_store import INLINE_MAX
from tests.overlay.conftest import Mounted
from tests.util import renameat2

pytestmark = pytest.mark.fuse

# A name at ext4's NAME_MAX and one past it: the view must take and refuse them as ext4 does.
LONG = "n" * 255
NAMES = ["a", "b", "c", "d", LONG, "n" * 256]
paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
data = st.binary(min_size=0, max_size=300)
# Small offsets, and ones around the size where a file's bytes move out of delta.db.
offsets = st.one_of(st.integers(0, 40), st.integers(INLINE_MAX - 8, INLINE_MAX + 8))
sizes = st.one_of(st.integers(0, 600), st.integers(INLINE_MAX - 8, INLINE_MAX + 8))


def seed_tree(root: Path) -> None:
    (root / "a" / "d").mkdir(parents=True)
    (root / "a" / "b").write_bytes(b"lower a/b\n")
    (root / "a" / "c").write_bytes(b"lower a/c\n" * 50)
    (root / "a" / "d" / "b").write_bytes(b"deep\n")
    (root / "a" / "d" / "c").write_bytes(b"big\n" * (INLINE_MAX // 3))
    (root / "b").write_bytes(b"lower b\n")
    (root / "a" / LONG).write_bytes(b"lower, long name\n")
    os.symlink("b", root / "c")


def _write(root: Path, p: str, payload: bytes, offset: int, trunc: bool) -> int:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if trunc else 0)
    fd = os.open(root / p, flags, 0o644)
    try:
        return os.pwrite(fd, payload, offset)
    finally:
        os.close(fd)


def _append(root: Path, p: str, payload: bytes) -> int:
    fd = os.open(root / p, os.O_WRONLY | os.O_APPEND)
    try:
        return os.write(fd, payload)
    finally:
        os.close(fd)


def _fallocate(root: Path, p: str, mode: int, offset: int, length: int) -> None:
    fd = os.open(root / p, os.O_RDWR)
    try:
        fallocate(fd, mode, offset, length)
    finally:
        os.close(fd)


def _read(root: Path, p: str) -> bytes:
    return (root / p).read_bytes()


def _stat(root: Path, p: str) -> tuple[int, int, int]:
    s = os.lstat(root / p)
    size = s.st_size if not stat.S_ISDIR(s.st_mode) else -1
    return (s.st_mode, s.st_nlink, size)


Op = tuple[str, Callable[..., Any], tuple[Any, ...]]

ops = st.one_of(
    st.tuples(st.just("write"), st.just(_write), st.tuples(paths, data, offsets, st.booleans())),
    st.tuples(st.just("append"), st.just(_append), st.tuples(paths, data)),
    st.tuples(
        st.just("truncate"),
        st.just(lambda r, p, n: os.truncate(r / p, n)),
        st.tuples(paths, sizes),
    ),
    st.tuples(st.just("mkdir"), st.just(lambda r, p: os.mkdir(r / p)), st.tuples(paths)),
    st.tuples(st.just("rmdir"), st.just(lambda r, p: os.rmdir(r / p)), st.tuples(paths)),
    st.tuples(st.just("unlink"), st.just(lambda r, p: os.unlink(r / p)), st.tuples(paths)),
    st.tuples(
        st.just("rename"), st.just(lambda r, a, b: os.rename(r / a, r / b)), st.tuples(paths, paths)
    ),
    st.tuples(
        st.just("renameat2"),
        st.just(lambda r, a, b, f: renameat2(bytes(r / a), bytes(r / b), f)),
        # NOREPLACE, EXCHANGE, WHITEOUT, NOREPLACE|WHITEOUT; then combinations and a flag
        # that renameat2(2) refuses with EINVAL
        st.tuples(paths, paths, st.sampled_from([1, 2, 4, 5, 3, 6, 8])),
    ),
    st.tuples(
        st.just("fallocate"),
        st.just(_fallocate),
        # 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE (|KEEP_SIZE); PUNCH_HOLE alone, and
        # with ZERO_RANGE, are refused (EOPNOTSUPP)
        st.tuples(paths, st.sampled_from([0, 1, 3, 0x10, 0x11, 2, 0x12]), offsets, sizes),
    ),
    st.tuples(
        st.just("symlink"),
        st.just(lambda r, t, p: os.symlink(t, r / p)),
        st.tuples(st.sampled_from(NAMES), paths),
    ),
    st.tuples(
        st.just("link"),
        st.just(lambda r, a, b: os.link(r / a, r / b, follow_symlinks=False)),
        st.tuples(paths, paths),
    ),
    st.tuples(
        st.just("chmod"),
        st.just(lambda r, p, m: os.chmod(r / p, m)),
        st.tuples(paths, st.sampled_from([0o600, 0o755, 0o640])),
    ),
    st.tuples(st.just("read"), st.just(_read), st.tuples(paths)),
    st.tuples(
        st.just("listdir"), st.just(lambda r, p: sorted(os.listdir(r / p))), st.tuples(paths)
    ),
    st.tuples(st.just("stat"), st.just(_stat), st.tuples(paths)),
)


def outcome(fn: Callable[..., Any], root: Path, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return ("ok", fn(root, *args))
    except OSError as e:
        return ("err", e.errno)
    except Exception as e:
        return ("err", getattr(e, "errno", repr(e)))


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            s = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISDIR(s.st_mode):
                out[rel] = ("dir", stat.S_IMODE(s.st_mode), s.st_nlink, sorted(os.listdir(p)))
            elif stat.S_ISLNK(s.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISCHR(s.st_mode):  # a whiteout that renameat2 left
                out[rel] = ("chr", s.st_mode, s.st_rdev, s.st_nlink)
            else:
                out[rel] = ("file", stat.S_IMODE(s.st_mode), s.st_nlink, p.read_bytes())
    return out


def _as_mounted(result: tuple[str, Any]) -> tuple[str, Any]:
    """The model's outcome as the view's mount would give it: the view is mounted `nodev`
    (as FUSE mounts of ordinary users always are), so opening the device a `RENAME_WHITEOUT`
    left is EACCES there, where the model's directory, which allows devices, says ENXIO
    (no driver for 0:0)."""
    return ("err", errno.EACCES) if result == ("err", errno.ENXIO) else result


def run_model(m: Mounted, model_root: Path, examples: int) -> None:
    counter = itertools.count()

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(ops, min_size=1, max_size=20))
    def check(sequence: list[Op]) -> None:
        base = f"ex{next(counter)}"
        seed_tree(m.lower / base)
        shutil.copytree(m.lower / base, model_root / base, symlinks=True)
        real, model = m.mnt / base, model_root / base
        for step, (name, fn, args) in enumerate(sequence):
            got, want = outcome(fn, real, args), _as_mounted(outcome(fn, model, args))
            assert got == want, f"step {step}: {name}{args}: view {got} != model {want}"
        assert snapshot(real) == snapshot(model)

    check()


def test_model(mounted: Mounted, tmp_path: Path) -> None:
    model_root = tmp_path / "model"
    model_root.mkdir()
    run_model(mounted, model_root, examples=40)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_model_long(mounted: Mounted, tmp_path: Path) -> None:
    model_root = tmp_path / "model"
    model_root.mkdir()
    run_model(mounted, model_root, examples=600)
