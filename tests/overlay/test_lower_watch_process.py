"""The lower watch process: what it reports, and what it leaves alone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.overlay.lower_watch_process import LINGER_S, TAG, address
from tests.live_util import eventually


class Reports:
    """A watch process over `root`, started here, and the paths it reported so far to this
    test's connection."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gitsess.overlay.lower_watch_process", os.fspath(root)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        self.sock = connect(root)
        self.batches: list[set[bytes]] = []
        self.ready = threading.Event()
        self.failed = threading.Event()
        self.synced = threading.Semaphore(0)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        pending, batch = b"", set[bytes]()
        while chunk := self.sock.recv(65536):
            *names, pending = (pending + chunk).split(b"\0")
            for name in names:
                if name.startswith(TAG):
                    continue  # (for a daemon's `LowerWatcher.quiet`)
                if name == b"/":
                    self.synced.release()
                elif name == b"//":
                    self.failed.set()
                elif name:
                    batch.add(name)
                elif batch:
                    self.batches.append(batch)
                    batch = set()
                else:
                    self.ready.set()

    def sync(self) -> None:
        self.sock.sendall(b"s")
        assert self.synced.acquire(timeout=10), "the watch never answered a sync"

    @property
    def seen(self) -> set[bytes]:
        return set().union(*self.batches)

    def stop(self) -> int:
        """Disconnects: with no one else connected, the process exits by itself."""
        self.sock.shutdown(socket.SHUT_RDWR)
        try:
            return self.proc.wait(timeout=10 + LINGER_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=5)
            self.sock.close()


def connect(root: Path) -> socket.socket:
    """A connection to the watch of `root`, once its process has taken its name."""
    name = address(os.fsencode(root))
    deadline = time.monotonic() + 30
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(name)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "deep" / "a.py").write_text("a\n")
    (root / "README").write_text("readme\n")
    (root / ".git" / "objects").mkdir(parents=True)
    return root


@pytest.fixture
def reports(tree: Path) -> Iterator[Reports]:
    r = Reports(tree)
    try:
        assert r.ready.wait(10), "the watch never said it was in place"
        yield r
    finally:
        assert r.stop() == 0


def test_changes_anywhere_below_are_reported(tree: Path, reports: Reports) -> None:
    (tree / "src" / "deep" / "a.py").write_text("changed\n")
    (tree / "src" / "new.txt").write_text("new\n")
    os.chmod(tree / "README", 0o600)
    (tree / "src" / "deep" / "a.py").rename(tree / "src" / "b.py")
    wanted = {b"src/deep/a.py", b"src/new.txt", b"README", b"src/b.py"}
    assert eventually(lambda: wanted <= reports.seen, timeout=10), reports.seen


def test_a_new_directory_s_contents_are_reported_and_watched(tree: Path, reports: Reports) -> None:
    # Made faster than a watch could be added to each level: what is inside is reported too.
    (tree / "n1" / "n2").mkdir(parents=True)
    (tree / "n1" / "n2" / "f").write_text("f\n")
    assert eventually(lambda: {b"n1", b"n1/n2", b"n1/n2/f"} <= reports.seen, timeout=10)
    (tree / "n1" / "n2" / "later").write_text("later\n")
    assert eventually(lambda: b"n1/n2/later" in reports.seen, timeout=10)


def test_a_moved_directory_is_watched_under_its_new_name(tree: Path, reports: Reports) -> None:
    (tree / "src").rename(tree / "lib")
    assert eventually(lambda: {b"src", b"lib", b"lib/deep/a.py"} <= reports.seen, timeout=10)
    reports.batches.clear()
    (tree / "lib" / "deep" / "c.py").write_text("c\n")
    assert eventually(lambda: b"lib/deep/c.py" in reports.seen, timeout=10)
    assert not any(p.startswith(b"src/") for p in reports.seen)


def test_removed_trees_are_reported(tree: Path, reports: Reports) -> None:
    shutil.rmtree(tree / "src")
    assert eventually(lambda: {b"src", b"src/deep/a.py"} <= reports.seen, timeout=10)


def test_reads_and_git_s_own_directory_are_not_changes(tree: Path, reports: Reports) -> None:
    for _ in range(3):
        (tree / "README").read_bytes()
        os.listdir(tree / "src" / "deep")
        (tree / "src" / "deep" / "a.py").read_bytes()
    (tree / ".git" / "index").write_bytes(b"index")
    (tree / ".git" / "objects" / "ab").mkdir()
    (tree / "marker").write_text("after the rest\n")
    # Events come in order: once the marker is reported, whatever came before it was too.
    assert eventually(lambda: b"marker" in reports.seen, timeout=10)
    assert reports.seen == {b"marker"}


def test_opens_queue_no_event(tree: Path, reports: Reports) -> None:
    # An open or a close after reading, of any worktree file by anyone (the daemon included),
    # must not queue an event for this process nor wake it: only changes are asked for.
    masks = []
    for fd in os.listdir(f"/proc/{reports.proc.pid}/fdinfo"):
        with open(f"/proc/{reports.proc.pid}/fdinfo/{fd}") as f:
            masks += [int(w[5:], 16) for w in f.read().split() if w.startswith("mask:")]
    assert len(masks) == 3  # the root, src, src/deep; not .git
    in_access, in_close_nowrite, in_open = 0x1, 0x10, 0x20
    assert not any(m & (in_access | in_close_nowrite | in_open) for m in masks)


def test_a_root_reached_through_a_symlink_is_watched(tree: Path) -> None:
    link = tree.parent / "link"
    link.symlink_to(tree)
    r = Reports(link)
    try:
        assert r.ready.wait(10)
        (tree / "src" / "deep" / "x").write_text("x\n")
        assert eventually(lambda: b"src/deep/x" in r.seen, timeout=10)
    finally:
        assert r.stop() == 0


def test_a_watch_that_cannot_be_set_up_never_says_it_is_in_place(tmp_path: Path) -> None:
    # What the daemon then does: it keeps its 1 s cache timeouts (see Tree.watched).
    proc = subprocess.run(
        [sys.executable, "-m", "gitsess.overlay.lower_watch_process", os.fspath(tmp_path / "gone")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert proc.stderr.decode().count("\n") == 1
    assert "gitsess watch: No such file or directory" in proc.stderr.decode()


def test_one_watch_serves_every_daemon_of_a_worktree(tree: Path, reports: Reports) -> None:
    """A second process started for the same worktree leaves it to the first, and a second
    connection gets what the first gets (issue 41: one watch per worktree, not per session)."""
    second = subprocess.run(
        [sys.executable, "-m", "gitsess.overlay.lower_watch_process", os.fspath(tree)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert second.returncode == 0
    other = connect(tree)
    try:
        got = b""
        other.settimeout(10)
        got += other.recv(1)
        assert got == b"\0"  # in place
        (tree / "README").write_text("changed\n")
        while b"README\0\0" not in got:
            got += other.recv(4096)
        assert eventually(lambda: b"README" in reports.seen, timeout=10)
    finally:
        other.close()
    assert reports.proc.poll() is None  # still serving the first


def test_a_file_written_without_pause_is_reported_while_it_is_written(
    tree: Path, reports: Reports
) -> None:
    stop = threading.Event()

    def write() -> None:
        with open(tree / "log", "ab", buffering=0) as f:
            while not stop.is_set():
                f.write(b"line\n")
                time.sleep(0.002)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert eventually(lambda: b"log" in reports.seen, timeout=10)
    finally:
        stop.set()
        writer.join()


def test_a_sync_answers_after_every_change_made_before_it(tree: Path, reports: Reports) -> None:
    """No waiting for the batch to settle: the changes are reported before the answer."""
    for i in range(20):
        name = f"f{i}".encode()
        (tree / "src" / f"f{i}").write_text("x\n")
        reports.sync()
        assert b"src/" + name in reports.seen
