"""The daemon's side of the lower watch: `quiet` spares a sync only when nothing the worktree
saw before it is unreported (git's fsmonitor answers rely on it)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.overlay.lower_watch_process import LINGER_S, address
from gitsess.overlay.lower_watcher import LowerWatcher
from tests.live_util import eventually


class Seen:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: set[bytes] = set()

    def add(self, rels: set[bytes]) -> None:
        with self._lock:
            self._paths |= rels

    def __contains__(self, rel: bytes) -> bool:
        with self._lock:
            return rel in self._paths


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "src").mkdir(parents=True)
    (root / ".git").mkdir()
    return root


@pytest.fixture
def watched(root: Path) -> Iterator[tuple[LowerWatcher, Seen]]:
    # The watch process started here (the watcher connects to it), so that it is waited for.
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitsess.overlay.lower_watch_process", os.fspath(root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    seen = Seen()
    watcher = LowerWatcher(os.fsencode(root), seen.add, lambda: None, lambda: None)
    try:
        assert eventually(lambda: _serving(root)), "the watch process never took its name"
        watcher.start()
        assert eventually(lambda: watcher.connection() is not None), "never in place"
        yield watcher, seen
    finally:
        watcher.stop()
        try:
            assert proc.wait(timeout=10 + LINGER_S) == 0  # (alone, it exits by itself)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _serving(root: Path) -> bool:
    with open("/proc/net/unix", "rb") as f:
        return b"@" + address(os.fsencode(root))[1:] in f.read()


def test_quiet_once_synced_while_nothing_changes(watched: tuple[LowerWatcher, Seen]) -> None:
    watcher, _ = watched
    assert watcher.sync(10)
    for _ in range(5):
        assert watcher.quiet()


def test_never_quiet_before_a_change_made_before_it_is_handed_on(
    root: Path, watched: tuple[LowerWatcher, Seen]
) -> None:
    watcher, seen = watched
    assert watcher.sync(10)
    for i in range(20):
        (root / "src" / f"f{i}.py").write_text("x\n")
        # (it may be quiet already if the change was reported and handed on meanwhile)
        assert not watcher.quiet() or f"src/f{i}.py".encode() in seen
        assert watcher.sync(10)
        assert f"src/f{i}.py".encode() in seen
        assert watcher.quiet()


def test_waits_for_the_watch_in_place(root: Path) -> None:
    """`wait_in_place` is what a wait for the watch being set up waits on (no polling): it
    returns once the watch is in place, and at once when no watch will be."""
    watcher = LowerWatcher(os.fsencode(root), lambda rels: None, lambda: None, lambda: None)
    assert not watcher.wait_in_place(60)  # never started
    watcher.start()  # (it starts the worktree's watch process: not in place at once)
    try:
        assert watcher.wait_in_place(60)
        assert watcher.connection() is not None
    finally:
        watcher.stop()
    assert not watcher.wait_in_place(60)
    assert watcher.connection() is None
