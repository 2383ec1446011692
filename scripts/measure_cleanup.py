#!/usr/bin/env python3
"""How soon a session gives the space of deleted files back, and what a remount waits for.

Three figures, each on a fresh session over a small git worktree in a temporary directory:

- free: 1,000 files of 200 KB written after a read of an existing file (from then on the
  kernel sends no RELEASE), then unlinked; the time from the `sync` request (the commit that
  deletes them) until `data/` is empty, and the data files' size before and after;
- remount: 20,000 files of 20 KB written, read and unlinked in the view, then `stop` and
  `ensure_mounted`: how long each takes, and what `data/` still holds;
- leftovers: what a daemon stopped with 20,000 deleted files open left (nodes no name reaches,
  and their data files; built offline), then `ensure_mounted`: how long the mount takes, and
  how long until the new daemon has removed the data files while it serves.

    .venv/bin/python scripts/measure_cleanup.py [--files N] [--remount-files N]

Timings depend on the machine and its load: read them, never assert them in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from gitsess.overlay import mounttable
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree
from gitsess.overlay.usage import data_bytes
from gitsess.runtime import mount

MB = 1000 * 1000


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _worktree(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README").write_text("readme\n")
    return path


@contextlib.contextmanager
def _session(root: Path) -> Iterator[mount.MountSpec]:
    session_dir = root / "session"
    session_dir.mkdir(mode=0o700)
    spec = mount.MountSpec(str(uuid.uuid4()), _worktree(root / "wt"), session_dir, persistent=True)
    try:
        yield spec
    finally:
        mount.stop(spec.session_dir, spec.target)
        if mounttable.is_mount_point(spec.target):
            mount.unmount(spec.target)


def _data(spec: mount.MountSpec) -> list[str]:
    try:
        return os.listdir(spec.session_dir / "data")
    except FileNotFoundError:
        return []


def _until_empty(spec: mount.MountSpec, limit: float = 600.0) -> float:
    start = time.monotonic()
    while _data(spec) and time.monotonic() - start < limit:
        time.sleep(0.005)
    return time.monotonic() - start


def _write_files(top: Path, count: int, size: int) -> None:
    top.mkdir()
    payload = os.urandom(size)
    for i in range(count):
        (top / f"f{i}").write_bytes(payload)


def measure_free(root: Path, files: int) -> None:
    with _session(root) as spec:
        mount.ensure_mounted(spec)
        (spec.target / "README").read_bytes()
        _write_files(spec.target / "scratch", files, 200_000)
        mount.sync(spec.session_dir)
        before = data_bytes(str(spec.delta))
        for i in range(files):
            (spec.target / "scratch" / f"f{i}").unlink()
        start = time.monotonic()
        mount.sync(spec.session_dir)
        committed = time.monotonic() - start
        emptied = _until_empty(spec) + committed
        _say(
            f"free: {files} files of 200 KB unlinked after a read: data files "
            f"{before / MB:.1f} MB -> {data_bytes(str(spec.delta)) / MB:.1f} MB, "
            f"{len(_data(spec))} left; commit {committed * 1000:.0f} ms, "
            f"data/ empty {emptied * 1000:.0f} ms after the sync request"
        )


def measure_remount(root: Path, files: int) -> None:
    with _session(root) as spec:
        mount.ensure_mounted(spec)
        (spec.target / "README").read_bytes()
        _write_files(spec.target / "scratch", files, 20_000)
        for i in range(files):
            (spec.target / "scratch" / f"f{i}").unlink()
        mount.sync(spec.session_dir)
        start = time.monotonic()
        mount.stop(spec.session_dir, spec.target)
        stopped = time.monotonic() - start
        mount.ensure_mounted(spec)
        remounted = time.monotonic() - start
        _say(
            f"remount: after {files} deletions (20 KB each): stop {stopped * 1000:.0f} ms, "
            f"then mount {(remounted - stopped) * 1000:.0f} ms; {len(_data(spec))} data files "
            f"left, delta.db {spec.delta.stat().st_size / MB:.1f} MB"
        )


def _leave_orphans(spec: mount.MountSpec, files: int) -> None:
    """What a daemon stopped with `files` deleted files open leaves behind."""
    store = DeltaStore(str(spec.delta))
    try:
        tree = Tree(store, str(spec.lower), set())
        payload = os.urandom(20_000)
        for i in range(files):
            n = tree.create(ROOT_INODE, b"f%d" % i, stat.S_IFREG | 0o644, 0, 0)
            tree.write(n, 0, payload)
            tree.opened(n)
            tree.unlink(ROOT_INODE, b"f%d" % i)
        tree.commit(durable=True)
        tree.close()
    finally:
        store.close()


def measure_leftovers(root: Path, files: int) -> None:
    with _session(root) as spec:
        _leave_orphans(spec, files)
        left = len(_data(spec))
        start = time.monotonic()
        mount.ensure_mounted(spec)
        mounted = time.monotonic() - start
        emptied = _until_empty(spec) + mounted
        _say(
            f"leftovers: {left} data files of deleted nodes: mount {mounted * 1000:.0f} ms, "
            f"data/ empty {emptied * 1000:.0f} ms after the mount began"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--remount-files", type=int, default=20_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gitsess-cleanup-") as tmp:
        for name, fn, count in (
            ("free", measure_free, args.files),
            ("remount", measure_remount, args.remount_files),
            ("leftovers", measure_leftovers, args.remount_files),
        ):
            (Path(tmp) / name).mkdir()
            fn(Path(tmp) / name, count)


if __name__ == "__main__":
    main()
