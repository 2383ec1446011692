from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.git.repo import discover
from gitsess.overlay import mounttable
from gitsess.runtime import mount
from tests.live_util import eventually, unmount_all
from tests.sweep_util import session
from tests.util import gitsess, make_repo


def test_escapes_are_undone_once_each() -> None:
    assert mounttable.unescape(rb"/a\040b\011c\012d\134e") == "/a b\tc\nd\\e"
    # a path holding a backslash and then "040" is written \134040, not a space
    assert mounttable.unescape(rb"/a\134040") == "/a\\040"
    assert mounttable.unescape(b"/caf\xe9") == os.fsdecode(b"/caf\xe9")


def test_the_table_knows_the_roots_mounts(tmp_path: Path) -> None:
    assert mounttable.is_mount_point("/proc")
    assert [m.fstype for m in mounttable.mounts() if m.point == "/proc"][-1] == "proc"
    assert not mounttable.is_mount_point(tmp_path)


@pytest.fixture
def spaced(tmp_path: Path) -> Iterator[Path]:
    """A repository whose path the mount table has to escape."""
    path = make_repo(tmp_path / "my repo\tand\\tabs")
    try:
        yield path
    finally:
        unmount_all(path)


@pytest.mark.fuse
def test_a_view_under_a_path_with_spaces_is_found_and_swept(spaced: Path) -> None:
    assert gitsess(spaced, "new", "s").returncode == 0
    assert gitsess(spaced, "mount", "s").returncode == 0
    mnt = discover(spaced).session_dir(session(spaced, "s").id) / "mnt"
    assert mounttable.is_mount_point(mnt)
    status = mount.status(discover(spaced).session_dir(session(spaced, "s").id))
    assert status is not None
    os.kill(status.daemon_pid, signal.SIGKILL)
    assert eventually(
        lambda: mount.status(discover(spaced).session_dir(session(spaced, "s").id)) is None
    )
    done = gitsess(spaced, "gc")
    assert done.returncode == 0, done.stderr
    assert not mounttable.is_mount_point(mnt)
    assert gitsess(spaced, "run", "-s", "s", "--", "sh", "-c", "echo x > f").returncode == 0
    # the daemon lingers a moment after its last participant, then unmounts
    assert eventually(lambda: not [m for m in mounttable.mounts() if str(spaced) in m.point])
