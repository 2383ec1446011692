"""Space of deleted files given back at once: a data file goes with the commit that deletes its
node, whatever the kernel was asked before, and a remount never waits for a cleanup."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from gitsess.overlay import schema
from tests.live_util import eventually
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse


def _data_files(m: Mounted) -> list[str]:
    try:
        return os.listdir(m.spec.session_dir / "data")
    except FileNotFoundError:
        return []


def _deleted_data_fds(m: Mounted) -> list[str]:
    """Data files the daemon still holds open after they were unlinked: their space is not
    back until it closes them."""
    fds = Path(f"/proc/{m.daemon_pid()}/fd")
    data = str(m.spec.session_dir / "data")
    held = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith(data) and target.endswith(" (deleted)"):
            held.append(target)
    return held


def _node_rows(m: Mounted) -> int:
    conn = schema.connect(str(m.spec.session_dir / "delta.db"), readonly=True)
    try:
        return int(conn.execute("SELECT count(*) FROM nodes").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        conn.close()


def test_unlinked_files_give_their_space_back_after_a_read(mounted: Mounted) -> None:
    # Once an open(2) of an existing file has been answered ENOSYS (fs.py's zero-message
    # opens), the kernel sends no RELEASE for any file, not even those made by CREATE.
    assert (mounted.mnt / "README").read_bytes() == b"readme\n"
    payload = os.urandom(200_000)
    scratch = mounted.mnt / "scratch"
    scratch.mkdir()
    for i in range(1000):
        (scratch / f"f{i}").write_bytes(payload)
    mounted.sync()
    assert len(_data_files(mounted)) == 1000
    rows = _node_rows(mounted)
    for i in range(1000):
        (scratch / f"f{i}").unlink()
    mounted.sync()
    assert eventually(lambda: not _data_files(mounted))
    assert eventually(lambda: not _deleted_data_fds(mounted))
    assert eventually(lambda: _node_rows(mounted) == rows - 1000)


def test_an_unlinked_file_keeps_its_data_while_it_is_open(mounted: Mounted) -> None:
    assert (mounted.mnt / "README").read_bytes() == b"readme\n"
    payload = os.urandom(200_000)
    with open(mounted.mnt / "held", "w+b") as f:
        f.write(payload)
        f.flush()
        (mounted.mnt / "held").unlink()
        mounted.sync()
        assert len(_data_files(mounted)) == 1
        f.seek(0)
        assert f.read() == payload
        f.write(b"more")
        f.seek(len(payload))
        assert f.read() == b"more"
    assert eventually(lambda: not _data_files(mounted))
    assert eventually(lambda: not _deleted_data_fds(mounted))


def test_a_remount_removes_what_a_crash_left_while_it_serves(mounted: Mounted) -> None:
    # Deleted files a daemon held open when it stopped (or crashed) are nodes no name reaches,
    # with their data files: the next daemon removes them once it serves the view.
    scratch = mounted.mnt / "scratch"
    scratch.mkdir()
    payload = os.urandom(100_000)
    held = []
    for i in range(20):
        f = open(scratch / f"f{i}", "w+b")  # noqa: SIM115 (closed below, after the unmount)
        f.write(payload)
        f.flush()
        held.append(f)
    try:
        for i in range(20):
            (scratch / f"f{i}").unlink()
        mounted.sync()
        assert len(_data_files(mounted)) == 20
        mounted.unmount()
    finally:
        for f in held:
            with contextlib.suppress(OSError):  # the view is gone under it
                f.close()
    assert len(_data_files(mounted)) == 20
    mounted.mount()
    assert eventually(lambda: not _data_files(mounted))
    assert (mounted.mnt / "README").read_bytes() == b"readme\n"
