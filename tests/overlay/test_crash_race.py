"""The daemon killed (SIGKILL) again and again under a load that fsyncs what it writes: after
each kill, every write the load saw fsync'd is in the view, and delta.db is whole (issue 29's
crash-and-race suite; the other parts are tests/test_disk_full.py, tests/test_apply_live_writer.py
and tests/test_security.py)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from gitsess.runtime import mount
from tests.live_util import eventually

from .conftest import Mounted

# The load, a process of its own: whole-file replacements (fsync'd file, rename, fsync'd
# directory), in-place rewrites and appends (fsync'd), removals. Each operation is
# logged outside the view before it starts ("doing") and once it is durable ("done").
LOAD = r"""
import hashlib, json, os, random, sys
view, log_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
log = open(log_path, "a", buffering=1)
dir_fd = os.open(view, os.O_RDONLY | os.O_DIRECTORY)

def note(state, name, data, torn=False):
    digest = None if data is None else hashlib.sha256(data).hexdigest()
    entry = {"state": state, "name": name, "sha": digest, "torn": torn}
    log.write(json.dumps(entry) + "\n")
    os.fsync(log.fileno())

def durable_replace(name, data):
    tmp = os.path.join(view, name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(view, name))
    os.fsync(dir_fd)

def rewrite(name, data):
    path = os.path.join(view, name)
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        f.write(data)
        f.truncate(len(data))
        os.fsync(f.fileno())

contents = {}
while True:
    name = f"f{rng.randrange(12)}"
    op = rng.random()
    if op < 0.15 and name in contents:
        note("doing", name, None)
        os.unlink(os.path.join(view, name))
        os.fsync(dir_fd)
        del contents[name]
        note("done", name, None)
        continue
    size = rng.choice([100, 5_000, 40_000, 300_000])
    data = rng.randbytes(size)
    if op < 0.3 and name in contents:
        data = contents[name] + data[:4096]
    # An in-place write killed half-way may leave any mix of old and new bytes, as on ext4.
    note("doing", name, data, torn=op >= 0.6)
    if op < 0.6:
        durable_replace(name, data)
    else:
        rewrite(name, data)
    contents[name] = data
    note("done", name, data)
"""


ANY = "any content"


def _expected(log: Path) -> dict[str, tuple[str | None, str | None]]:
    """Per name: the content it had when its last durable operation ended, and the content of
    the operation in flight at the kill (if any), as hashes (None: absent; ANY: an in-place
    write cut short)."""
    done: dict[str, str | None] = {}
    doing: dict[str, str | None] = {}
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # the line being written at the kill
            continue
        if entry["state"] == "doing":
            doing[entry["name"]] = ANY if entry["torn"] else entry["sha"]
        else:
            done[entry["name"]] = entry["sha"]
            doing.pop(entry["name"], None)
    return {name: (done.get(name), doing.get(name, done.get(name))) for name in done | doing}


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _done_count(log: Path) -> int:
    return log.read_text().count('"state": "done"') if log.exists() else 0


def _kill_under_load(mounted: Mounted, log: Path, seed: int) -> None:
    done_before = _done_count(log)
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, str(mounted.mnt), str(log), str(seed)],
        stderr=subprocess.DEVNULL,
    )
    daemon = mounted.daemon_pid()
    try:
        # The kill lands a random while into the load, once it is under way: the load's
        # interpreter may take longer to start on a loaded machine than the while lasts.
        assert eventually(lambda: _done_count(log) > done_before or load.poll() is not None)
        assert load.poll() is None, "the load ended by itself"
        time.sleep(random.Random(seed).uniform(0.0, 0.7))
        os.kill(daemon, signal.SIGKILL)
    finally:
        load.kill()
        load.wait()
    assert eventually(lambda: mount.status(mounted.spec.session_dir) is None)
    mount.clean_stale(mounted.mnt)
    conn = apsw.Connection(str(mounted.spec.delta), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert list(conn.execute("PRAGMA integrity_check")) == [("ok",)]
    finally:
        conn.close()
    mounted.mount()


def _check(mounted: Mounted, log: Path) -> None:
    for name, (durable, in_flight) in _expected(log).items():
        found = _sha(mounted.mnt / name)
        assert in_flight == ANY or found in (durable, in_flight), name
    for leftover in mounted.mnt.glob("*.tmp"):
        leftover.unlink()


def _rounds(mounted: Mounted, tmp_path: Path, kills: int) -> None:
    log = tmp_path / "load.log"
    for seed in range(kills):
        _kill_under_load(mounted, log, seed)
        _check(mounted, log)
    assert _expected(log), "the load wrote nothing"


@pytest.mark.timeout(120)
def test_a_few_kills_under_fsynced_load_lose_nothing(mounted: Mounted, tmp_path: Path) -> None:
    _rounds(mounted, tmp_path, 4)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_forty_kills_under_fsynced_load_lose_nothing(mounted: Mounted, tmp_path: Path) -> None:
    _rounds(mounted, tmp_path, 40)
