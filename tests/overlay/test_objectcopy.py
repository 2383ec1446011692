"""A session's object store on disk: what a checkpoint keeps of it (`objectdir.keep`), what a
rewind brings back (`objectdir.bring_back`), and a fork's copy of it (`objectcopy.copy_store`),
without a mount."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gitsess.overlay import objectcopy, objectdir

LOOSE = "ab/" + "c" * 38
PACK = "pack/pack-" + "1" * 40


def _session(tmp_path: Path, name: str) -> Path:
    """A session dir whose store (made as the lower layer makes it) borrows `real`."""
    real = tmp_path / "real"
    real.mkdir(exist_ok=True)
    session = tmp_path / name
    session.mkdir()
    objectdir.prepare(bytes(session), bytes(real))
    return session


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o444)


def test_keep_links_the_object_files_and_only_those(tmp_path: Path) -> None:
    s = _session(tmp_path, "s")
    store = s / "objects"
    _write(store / LOOSE, b"loose")
    _write(store / (PACK + ".pack"), b"pack")
    _write(store / "ab" / "tmp_obj_x", b"being written")
    (store / "pack" / "pack-planted.idx").symlink_to(tmp_path / "real")
    objectdir.keep(bytes(s))
    kept = s / "kept"
    assert os.path.samefile(kept / LOOSE, store / LOOSE)
    assert os.path.samefile(kept / (PACK + ".pack"), store / (PACK + ".pack"))
    assert sorted(p.name for p in kept.rglob("*") if p.is_file() or p.is_symlink()) == [
        "c" * 38,
        "pack-" + "1" * 40 + ".pack",
    ]
    # what a gc then removes from the store stays kept, is read with the store, and a rewind
    # links it back
    (store / LOOSE).unlink()
    (store / (PACK + ".pack")).unlink()
    objectdir.keep(bytes(s))
    assert (kept / LOOSE).read_bytes() == b"loose"
    assert objectdir.own_files(bytes(s)).read_object_file(LOOSE) == b"loose"
    assert objectdir.own_files(bytes(s)).own_loose_objects() == ["ab" + "c" * 38]
    objectdir.bring_back(bytes(s))
    assert os.path.samefile(store / LOOSE, kept / LOOSE)
    assert os.path.samefile(store / (PACK + ".pack"), kept / (PACK + ".pack"))
    # not an alternate of the store: git's gc would never pack what a checkpoint kept
    alternates = (store / "info" / "alternates").read_bytes()
    assert alternates == bytes(s / "lower" / "objects") + b"\n"


def test_a_forks_copy_is_its_own(tmp_path: Path) -> None:
    src = _session(tmp_path, "src")
    store = src / "objects"
    _write(store / LOOSE, b"loose")
    _write(store / (PACK + ".pack"), b"pack")
    (store / "commit-graph").write_bytes(b"graph")
    (store / "ab" / "planted").symlink_to(tmp_path / "real")
    objectdir.keep(bytes(src))
    gone = "cd/" + "e" * 38  # kept only: a gc removed it from the store since
    _write(src / "kept" / gone, b"gone")
    dest = tmp_path / "dest"
    dest.mkdir()
    objectcopy.copy_store(bytes(src), bytes(dest))
    copy = dest / "objects"
    for rel in (LOOSE, PACK + ".pack", "commit-graph"):
        assert (copy / rel).read_bytes() == (store / rel).read_bytes()
        # a copy, not a link: a run of one session cannot change the other's files in place
        assert not os.path.samefile(copy / rel, store / rel)
    assert (copy / LOOSE).stat().st_mode & 0o777 == 0o444
    assert not (copy / "ab" / "planted").exists() and not (copy / "ab" / "planted").is_symlink()
    # its kept files are links of its own store's, as the source's were
    assert os.path.samefile(dest / "kept" / LOOSE, copy / LOOSE)
    assert (dest / "kept" / gone).read_bytes() == b"gone"
    assert not os.path.samefile(dest / "kept" / gone, src / "kept" / gone)
    # its alternates and symlinks name its own session dir
    assert (copy / "info" / "alternates").read_bytes() == bytes(dest / "lower" / "objects") + b"\n"
    assert os.readlink(dest / "lower" / "objects") == str(tmp_path / "real")
    assert os.readlink(dest / "objects-link") == str(copy)


# Each state is held a random while: spun through without a pause, the time in each state
# is that of the syscalls between, and a scheduler may then show the copies only one of them.
FLIP = """
import os, random, sys, time
store, outside, started, stop = sys.argv[1:]
fan, aside, link = (os.path.join(store, n) for n in ("ab", "ab-aside", "ab-link"))

def hold():
    time.sleep(random.random() * 0.0003)

open(started, "w").close()
while not os.path.exists(stop):
    os.symlink(outside, link)
    hold()
    os.rename(fan, aside)
    hold()
    os.rename(link, fan)
    hold()
    os.unlink(fan)
    hold()
    os.rename(aside, fan)
    hold()
"""


def test_a_fork_never_copies_what_a_racing_run_points_its_store_at(tmp_path: Path) -> None:
    """A run may swap a dir of its store for a symlink while a fork copies it: nothing the
    symlink leads to (here a file named as the object, holding a secret) reaches the copy.
    Walking by paths, 1 fork in 20 here copied the secret."""
    src = _session(tmp_path, "src")
    store = src / "objects"
    _write(store / LOOSE, b"loose")
    outside = tmp_path / "outside"
    _write(outside / LOOSE.split("/")[1], b"secret")
    started, stop = tmp_path / "started", tmp_path / "stop"
    flipper = subprocess.Popen(
        [sys.executable, "-c", FLIP, str(store), str(outside), str(started), str(stop)]
    )
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert flipper.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        found = {b"loose": 0, None: 0}
        k = 0
        # at least 500 forks, and on until both states were met (a bounded while)
        while k < 500 or (min(found.values()) == 0 and time.monotonic() < deadline + 60):
            k += 1
            dest = tmp_path / f"dest{k}"
            dest.mkdir()
            objectcopy.copy_store(bytes(src), bytes(dest))
            copy = dest / "objects" / LOOSE
            data = copy.read_bytes() if copy.is_file() and not copy.is_symlink() else None
            assert data in found, data
            found[data] += 1
    finally:
        stop.touch()
        flipper.wait(timeout=30)
    assert flipper.returncode == 0
    # the race was on: some forks found the real dir, some found the symlink
    assert found[b"loose"] > 0 and found[None] > 0, found
