"""A lookup in a directory has the daemon list it through the mount, so the kernel holds its
other entries before they are asked for."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pyfuse3
import pytest
import trio
from pyfuse3 import FileNameT, InodeT, RequestContext

from gitsess.overlay import fs, listahead
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.fs import LIST_AHEAD_MAX_BYTES
from gitsess.overlay.listahead import ListAhead
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree
from gitsess.runtime import mount
from tests.overlay.conftest import Mounted, make_worktree

pytestmark = pytest.mark.fuse

SMALL = 40


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """The usual worktree, with a directory of a few files and one too big to list ahead,
    made before the view is mounted so that the kernel knows none of their names."""
    wt = make_worktree(tmp_path / "wt")
    (wt / "small").mkdir()
    for i in range(SMALL):
        (wt / "small" / f"f{i}").write_text(f"{i}\n")
    for sub in range(3):
        (wt / "tree" / f"sub{sub}").mkdir(parents=True)
        for i in range(5):
            (wt / "tree" / f"sub{sub}" / f"f{i}").write_text(f"{sub}.{i}\n")
    big = wt / "big"
    big.mkdir()
    for i in range(2):
        (big / f"f{i}").write_text(f"{i}\n")
    while os.stat(big).st_size <= LIST_AHEAD_MAX_BYTES:
        for _ in range(50):
            (big / f"{uuid.uuid4().hex}{uuid.uuid4().hex}").touch()
    return wt


def _answered_while_stopped(m: Mounted, paths: list[Path], wait: float) -> bool:
    """Whether a process could lstat every path while the daemon was stopped: only the
    kernel's caches can answer then."""
    for directory in {p.parent for p in paths}:
        # A walk to them checks the permissions of every directory on the way: have the
        # kernel hold their attributes (the root's may date from before the watch).
        os.stat(directory)
        for parent in directory.relative_to(m.mnt).parents:
            os.stat(m.mnt / parent)
    code = "import os, sys\nfor p in sys.argv[1:]: os.lstat(p)"
    return m.run_while_stopped(code, *map(str, paths), wait=wait) is not None


def test_the_other_entries_are_answered_by_the_kernel(mounted: Mounted) -> None:
    mounted.wait_watched()
    os.lstat(mounted.mnt / "small" / "f0")
    mounted.wait_listed()
    others = [mounted.mnt / "small" / f"f{i}" for i in range(1, SMALL)]
    assert _answered_while_stopped(mounted, others, wait=10)
    assert [p.read_text() for p in others[:3]] == ["1\n", "2\n", "3\n"]


def test_the_subdirectories_of_a_directory_a_lookup_listed_are_listed_too(
    mounted: Mounted,
) -> None:
    # The lookup of `tree` lists the root, and its listing the root's subdirectories the
    # kernel does not hold yet: `small`, whose names are then the kernel's to answer. (A
    # lookup two levels down would race: the root's listing may list `tree` before the
    # lookup inside it, and a directory listed ahead does not list its own subdirectories.)
    mounted.wait_watched()
    os.lstat(mounted.mnt / "tree")
    mounted.wait_listed()
    inside = [mounted.mnt / "small" / f"f{i}" for i in range(SMALL)]
    assert _answered_while_stopped(mounted, inside, wait=10)
    assert (mounted.mnt / "small" / "f7").read_text() == "7\n"


def test_a_listed_directory_is_stated_and_opened_by_the_kernel(mounted: Mounted) -> None:
    # The kernel marks a directory's atime stale when it lists it, and glibc's opendir stats
    # the directory it opens: the lister stats it again after listing it.
    mounted.wait_watched()
    small = mounted.mnt / "small"
    os.lstat(small / "f0")
    mounted.wait_listed()
    os.stat(mounted.mnt)  # the walk to `small` checks the root's permissions
    code = "import os, sys\nos.stat(sys.argv[1])\nprint(len(os.listdir(sys.argv[1])))"
    out = mounted.run_while_stopped(code, str(small), wait=10)
    assert out is not None, "a request reached the stopped daemon"
    assert out.decode().strip() == str(SMALL)


def test_a_huge_directory_is_not_listed_ahead(mounted: Mounted) -> None:
    mounted.wait_watched()
    os.lstat(mounted.mnt / "big" / "f0")
    mounted.wait_listed()
    assert not _answered_while_stopped(mounted, [mounted.mnt / "big" / "f1"], wait=1)
    assert (mounted.mnt / "big" / "f1").read_text() == "1\n"


def test_a_directory_is_listed_again_only_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own clock: with the real one, a loaded machine may pause between two calls.
    now = [1000.0]
    monkeypatch.setattr(listahead, "time", SimpleNamespace(monotonic=lambda: now[0]))
    ahead = ListAhead("/nonexistent")
    assert ahead.due(5)
    now[0] += listahead.AGAIN * 0.9
    assert not ahead.due(5)
    assert ahead.due(6)
    now[0] += listahead.AGAIN * 0.2
    assert ahead.due(5)


def test_listing_threads_end_when_stopped_even_with_the_view_gone(tmp_path: Path) -> None:
    """In a process of its own: the threads are the process's, and a stop is for good. A
    directory to lstat the entries of takes several reads of its entries."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(3000):
        (many / f"entry-{i:05d}").touch()
    code = f"""
import os, time
from gitsess.overlay import _lister
tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
assert _lister.list_ahead(b"/nonexistent/gone", {listahead.THREADS})
assert _lister.list_ahead(b"/nonexistent/gone/too", {listahead.THREADS})
assert tasks() == before + {listahead.THREADS}, tasks()
assert _lister.stat_ahead(b"/nonexistent/gone", {listahead.THREADS})
assert _lister.stat_ahead({str(many).encode()!r}, {listahead.THREADS})
deadline = time.monotonic() + 10
while _lister.pending() and time.monotonic() < deadline:
    time.sleep(0.01)
assert _lister.pending() == 0
_lister.stop()
assert not _lister.list_ahead(b"/", {listahead.THREADS})
while tasks() > before and time.monotonic() < deadline:
    time.sleep(0.01)
assert tasks() == before, tasks()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_listing_threads_work_while_python_holds_the_gil(tmp_path: Path) -> None:
    """The threads never take the GIL: they finish a directory of 3,000 lstats while the only
    Python thread computes for two seconds and, with a switch interval longer than that, never
    lets the GIL go (threads that needed it would still be waiting)."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(3000):
        (many / f"entry-{i:05d}").touch()
    code = f"""
import sys, time
from gitsess.overlay import _lister
sys.setswitchinterval(60)
assert _lister.stat_ahead({str(many).encode()!r}, 1)
end = time.monotonic() + 2
while time.monotonic() < end:
    pass
assert _lister.pending() == 0, _lister.pending()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_a_view_stops_by_itself_while_its_listings_are_in_flight(tmp_path: Path) -> None:
    """A listing in flight holds its directory's lock until the daemon answers; the worktree
    watch, which invalidates that directory once in place, waited for the lock, and the
    stopping daemon for the watch, 5 s (in a loop like this one, 1 stop in 10-16)."""
    lower = make_worktree(tmp_path / "wt")
    for i in range(10):
        session_dir = tmp_path / f"s{i}"
        session_dir.mkdir(mode=0o700)
        spec = mount.MountSpec(str(uuid.uuid4()), lower, session_dir, persistent=True)
        try:
            mount.ensure_mounted(spec)
            assert (spec.target / "README").read_text() == "readme\n"
            os.lstat(spec.target / "src" / "main.py")
            assert mount.stop(spec.session_dir, spec.target)
        finally:
            mount.stop(spec.session_dir, spec.target)
        assert "unmounted" in spec.log.read_text(), f"stop {i} needed a kill"


def test_a_missing_name_in_a_directory_the_session_made_lists_nothing(tmp_path: Path) -> None:
    """`tar -x` or `cp -r` into a new directory: the kernel looks up each name before it
    makes it. The kernel holds every name made there through the view, so such a lookup lists
    nothing ahead (it was 2 READDIRPLUS a file of an untar); one in a worktree directory does,
    and so does one that finds its name in a directory the session made."""
    lower = tmp_path / "lower"
    (lower / "dir").mkdir(parents=True)
    ahead = ListAhead(str(tmp_path / "nowhere"))
    with _in_process(tmp_path, ahead) as (tree, filesystem):
        uid, gid = os.getuid(), os.getgid()
        made = tree.mkdir(ROOT_INODE, b"made", 0o755, uid, gid)
        filled = tree.mkdir(ROOT_INODE, b"filled", 0o755, uid, gid)
        tree.create(filled.ino, b"there", 0o100644, uid, gid)
        worktree_dir = tree.resolve(b"dir")
        assert worktree_dir is not None

        def look(parent: int, name: bytes) -> None:
            _call(filesystem, "lookup", InodeT(parent), FileNameT(name))

        look(made.ino, b"missing")
        assert ahead.due(made.ino), "listed ahead for a name being made"
        look(worktree_dir.ino, b"missing")
        assert not ahead.due(worktree_dir.ino), "a worktree directory was not listed ahead"
        look(filled.ino, b"there")
        assert not ahead.due(filled.ino), "a lookup that found its name listed nothing"


@contextlib.contextmanager
def _in_process(tmp_path: Path, ahead: ListAhead) -> Iterator[tuple[Tree, fs.Filesystem]]:
    """The view's tree over `tmp_path/lower` and its request handlers, with no mount."""
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    try:
        tree = Tree(store, str(tmp_path / "lower"), set())
        tree.catch_up()
        yield tree, fs.Filesystem(tree, ahead)
        tree.close()
    finally:
        store.close()


def _call(filesystem: fs.Filesystem, op: str, *args: object) -> None:
    async def run() -> None:
        await getattr(filesystem, op)(*args, RequestContext())

    trio.run(run)


class _Ahead(ListAhead):
    """A ListAhead whose listings are pending or not as the test says."""

    pending = False

    @property
    def idle(self) -> bool:
        return not self.pending


def test_a_directory_changed_while_listings_are_pending_is_told_to_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing thread's GETATTR (its `fstat` after a listing) or READDIRPLUS answered before
    a request changed a directory, and taken in by the kernel after it, put the directory's old
    attributes back for 300 s: the kernel only marks them stale on such a change. So while a
    listing is pending, the request tells the kernel before its reply, which makes the kernel
    drop any reply asked before (a hammer of listings and `fstat`s at `bin` during 800
    RENAME_EXCHANGEs left a stale link count 2 times; `test_basic`'s exchange test failed
    once in 6 runs at load 11)."""
    told: list[tuple[int, bool]] = []
    monkeypatch.setattr(
        pyfuse3, "invalidate_inode", lambda ino, attr_only=False: told.append((ino, attr_only))
    )
    lower = tmp_path / "lower"
    for d in ("a", "b"):
        (lower / d).mkdir(parents=True)
    (lower / "a" / "f").write_text("f\n")
    ahead = _Ahead(str(tmp_path / "nowhere"))
    with _in_process(tmp_path, ahead) as (tree, filesystem):
        a, b = tree.resolve(b"a"), tree.resolve(b"b")
        assert a is not None and b is not None

        def call(op: str, *args: object) -> None:
            _call(filesystem, op, *args)

        call("mkdir", InodeT(a.ino), FileNameT(b"quiet"), 0o755)
        assert told == [], "told with no listing pending"
        ahead.pending = True
        call("mkdir", InodeT(a.ino), FileNameT(b"new"), 0o755)
        assert told == [(a.ino, True)]
        call("rename", InodeT(a.ino), FileNameT(b"new"), InodeT(b.ino), FileNameT(b"moved"), 0)
        call("unlink", InodeT(a.ino), FileNameT(b"f"))
        call("rmdir", InodeT(b.ino), FileNameT(b"moved"))
        assert told[1:] == [(a.ino, True), (b.ino, True), (a.ino, True), (b.ino, True)]
