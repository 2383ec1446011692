"""Model check of checkpoints on a mounted session: random file and git operations with
checkpoints between them, each checkpoint copied with `cp -a`, then rewinds to random
checkpoints, after each of which the view must equal that copy (files, modes, symlinks, empty
directories, extended attributes, the session's `.git` with its objects)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsess.git.repo import discover
from gitsess.services import checkpoints, live, sessions
from tests.util import make_repo

pytestmark = pytest.mark.fuse

NAMES = ["a.txt", "src/b.py", "src/deep/c", "big.bin", "README.md"]
ops = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), st.integers(0, 40_000)),
    st.tuples(st.just("rm"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("chmod"), st.sampled_from(NAMES), st.sampled_from([0o644, 0o755])),
    st.tuples(st.just("link"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("commit"), st.just(""), st.just(0)),
    st.tuples(st.just("branch"), st.just(""), st.integers(0, 3)),
    st.tuples(st.just("mkdir"), st.just(""), st.integers(0, 3)),
    st.tuples(st.just("xattr"), st.sampled_from(NAMES), st.integers(0, 2)),
    st.tuples(st.just("checkpoint"), st.just(""), st.just(0)),
    st.tuples(st.just("rewind"), st.just(""), st.integers(0, 50)),
)


State = dict[str, tuple[str, bytes, int, dict[str, bytes]]]


def state_of(root: Path) -> State:
    """What `cp -a` keeps, path by path: kind, content (a symlink's target), permission bits
    and extended attributes; `.git/objects` included (the session's objects are its own)."""
    out: State = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st_ = os.lstat(path)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("l", os.fsencode(os.readlink(path)), 0, {})
                continue
            xattrs = {k: os.getxattr(path, k) for k in os.listxattr(path) if k.startswith("user.")}
            if stat.S_ISDIR(st_.st_mode):
                out[rel] = ("d", b"", st_.st_mode & 0o7777, xattrs)
            else:
                out[rel] = ("f", Path(path).read_bytes(), st_.st_mode & 0o7777, xattrs)
    return out


def _git(mnt: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=mnt, check=False, capture_output=True, timeout=60)


def _apply(mnt: Path, op: str, name: str, n: int, i: int) -> None:
    path = mnt / name
    if op == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_dir():
            return
        path.write_bytes(bytes([48 + i % 10]) * n)
    elif op == "rm" and (path.is_file() or path.is_symlink()):
        path.unlink()
    elif op == "chmod" and path.is_file() and not path.is_symlink():
        path.chmod(n)
    elif op == "link" and not os.path.lexists(path.with_suffix(".lnk")) and path.parent.is_dir():
        os.symlink(name.rsplit("/", 1)[-1], path.with_suffix(".lnk"))
    elif op == "mkdir":
        (mnt / "empty" / f"d{n}").mkdir(parents=True, exist_ok=True)
    elif op == "xattr" and path.is_file() and not path.is_symlink():
        os.setxattr(path, "user.note", b"v%d-%d" % (n, i))
    elif op == "commit":
        _git(mnt, "add", "-A")
        _git(mnt, "commit", "-q", "-m", f"step {i}")
    elif op == "branch":
        _git(mnt, "checkout", "-q", "-B", f"b{n}")


def _run_model(tmp: Path, steps: list[tuple[str, str, int]]) -> None:
    repo = make_repo(tmp / "repo", {"README.md": "hello\n", "src/b.py": "x = 1\n"})
    ctx = discover(repo)
    session = sessions.create(ctx, "model")
    try:
        status = live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        )
        mnt = Path(status.mountpoint)
        copies: dict[int, Path] = {}

        def copy(cp: int) -> None:
            copies[cp] = tmp / f"cp{cp}"
            subprocess.run(["cp", "-a", str(mnt), str(copies[cp])], check=True)

        for i, (op, name, n) in enumerate(steps):
            if op == "checkpoint":
                made = checkpoints.checkpoint(ctx, session).checkpoint
                assert made is not None
                copy(made)
            elif op == "rewind" and copies:
                target = sorted(copies)[n % len(copies)]
                before = tmp / "before"
                subprocess.run(["cp", "-a", str(mnt), str(before)], check=True)
                done = checkpoints.rewind(ctx, session, target)
                assert state_of(mnt) == state_of(copies[target]), f"after rewind to {target}"
                os.rename(before, tmp / f"cp{done.before}")
                copies[done.before] = tmp / f"cp{done.before}"
            else:
                _apply(mnt, op, name, n, i)
        final = state_of(mnt)
        live.unmount(ctx, session)
        status = live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        )
        assert state_of(Path(status.mountpoint)) == final  # as delta.db has it
    finally:
        live.unmount(ctx, session)
        for p in tmp.glob("cp*"):
            shutil.rmtree(p, ignore_errors=True)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ops, min_size=4, max_size=16))
def test_model(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]) -> None:
    _run_model(tmp_path_factory.mktemp("cpmodel"), steps)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ops, min_size=4, max_size=40))
def test_model_long(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]
) -> None:
    _run_model(tmp_path_factory.mktemp("cpmodel"), steps)
