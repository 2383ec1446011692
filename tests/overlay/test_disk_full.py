"""A full disk under a live session: acknowledged writes stay, the view stays mounted, and every
command says "no space" in one line (issue 29 item 10). The session's state is on a 30 MB tmpfs."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import apsw
import pytest

from gitsess.errors import GitsessError
from gitsess.overlay import mounttable
from gitsess.processes import alive
from gitsess.runtime import mount
from tests.live_util import eventually
from tests.util import gitsess

pytestmark = pytest.mark.fuse


@dataclass
class FullDisk:
    repo: Path
    disk: Path
    view: Path
    env: dict[str, str]

    @property
    def session_dir(self) -> Path:
        (found,) = (self.disk / "state" / "sessions").iterdir()
        return found

    def fill(self) -> None:
        with open(self.disk / "filler", "wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()

    def free(self) -> None:
        (self.disk / "filler").unlink()

    def daemon_pid(self) -> int:
        live = mount.status(self.session_dir)
        assert live is not None
        return live.daemon_pid


@pytest.fixture
def full_disk(repo: Path, tmp_path: Path) -> Iterator[FullDisk]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(disk)], check=True)
    view = tmp_path / "view"
    view.mkdir()
    setup = FullDisk(repo, disk, view, {"GITSESS_DIR": str(disk / "state")})
    try:
        assert gitsess(repo, "new", "exp", env=setup.env).returncode == 0
        assert gitsess(repo, "mount", "exp", str(view), env=setup.env).returncode == 0
        yield setup
    finally:
        (disk / "filler").unlink(missing_ok=True)
        for session_dir in (disk / "state" / "sessions").glob("*"):
            mount.stop(session_dir, view)
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _write_small_files(view: Path, prefix: str, count: int) -> dict[str, bytes]:
    """Small files: their bytes are acknowledged while only in the daemon's memory."""
    written = {f"{prefix}{i}": f"{prefix} {i}\n".encode() for i in range(count)}
    for name, data in written.items():
        (view / name).write_bytes(data)
    return written


def _delta_is_whole(session_dir: Path) -> None:
    conn = apsw.Connection(str(session_dir / "delta.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert list(conn.execute("PRAGMA integrity_check")) == [("ok",)]
    finally:
        conn.close()


def _reads_back(d: FullDisk, written: dict[str, bytes]) -> None:
    assert gitsess(d.repo, "mount", "exp", str(d.view), env=d.env).returncode == 0
    for name, data in written.items():
        assert (d.view / name).read_bytes() == data, name


def test_a_stop_signal_on_a_full_disk_waits_for_space_and_loses_nothing(
    full_disk: FullDisk,
) -> None:
    d = full_disk
    written = _write_small_files(d.view, "before", 20)
    d.fill()
    written |= _write_small_files(d.view, "late", 20)
    pid = d.daemon_pid()
    os.kill(pid, signal.SIGTERM)
    time.sleep(1)
    os.kill(pid, signal.SIGTERM)  # a second one must not end it either
    time.sleep(1)
    assert alive(pid)
    assert mounttable.is_mount_point(d.view)
    assert (d.view / "late19").read_bytes() == written["late19"]
    d.free()
    assert eventually(lambda: not alive(pid), timeout=20)
    assert not mounttable.is_mount_point(d.view)
    _delta_is_whole(d.session_dir)
    _reads_back(d, written)


def test_unmounting_on_a_full_disk_says_no_space_and_keeps_the_view(full_disk: FullDisk) -> None:
    d = full_disk
    d.fill()
    written = _write_small_files(d.view, "late", 10)
    done = gitsess(d.repo, "umount", "exp", env=d.env)
    assert done.returncode == 1
    assert "no space" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    # The daemon itself refuses to stop while what it holds cannot be saved.
    with pytest.raises(GitsessError, match="stays mounted"):
        mount.stop(d.session_dir, d.view)
    assert mounttable.is_mount_point(d.view)
    assert (d.view / "late9").read_bytes() == written["late9"]
    d.free()
    assert gitsess(d.repo, "umount", "exp", env=d.env).returncode == 0
    _reads_back(d, written)


def test_writes_after_space_comes_back_are_kept_too(full_disk: FullDisk) -> None:
    d = full_disk
    d.fill()
    with pytest.raises(OSError):
        (d.view / "big").write_bytes(os.urandom(4 << 20))  # data files hit the full disk
    d.free()
    written = _write_small_files(d.view, "again", 10)
    (d.view / "big").write_bytes(b"b" * (4 << 20))
    written["big"] = b"b" * (4 << 20)
    assert gitsess(d.repo, "umount", "exp", env=d.env).returncode == 0
    _delta_is_whole(d.session_dir)
    _reads_back(d, written)


def test_apply_commit_on_a_full_disk_says_no_space(tmp_path: Path) -> None:
    """libgit2 reports a failed object write on a full disk as "no error" (issue 37 item 14)."""
    from tests.util import make_repo

    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        repo = make_repo(disk / "repo")
        script = "head -c 3000000 /dev/urandom > big.bin"
        assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script).returncode == 0
        with open(disk / "filler", "wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        # Room for the apply's journal and lock, not for the 3 MB object.
        filler = disk / "filler"
        os.truncate(filler, filler.stat().st_size - (512 << 10))
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True)
        done = gitsess(repo, "apply", "exp", "--commit", "-m", "big")
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1, done.stderr
        assert "no error" not in done.stderr
        assert "no space" in done.stderr.lower(), done.stderr
        again = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True)
        assert again.stdout == head.stdout
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_git_error_on_a_full_disk_says_no_space_whatever_libgit2_said_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails on a full disk leaves libgit2's last message, which may be one it
    set and recovered from before ("could not find ... to touch", looking for the object)."""
    import pygit2

    from gitsess.cli.group import one_line

    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        with open(disk / "filler", "wb") as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        monkeypatch.chdir(disk)
        stale = pygit2.GitError("could not find '/r/.git/objects/75/1234' to touch")
        # (libgit2's errors of the OS class come as an OSError, with no errno: seen on CI)
        as_os = OSError("could not find '/r/.git/objects/75/1234' to touch: No such file")
        for e in (stale, as_os):
            assert "no space" in (one_line(e) or "").lower()
        monkeypatch.chdir(tmp_path)
        assert one_line(stale) == "git: could not find '/r/.git/objects/75/1234' to touch"
        assert one_line(as_os) == str(as_os)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_fork_on_a_full_disk_leaves_no_session_behind(full_disk: FullDisk) -> None:
    """Issue 37 item 12: all or nothing."""
    (full_disk.view / "big.bin").write_bytes(os.urandom(6 << 20))
    assert gitsess(full_disk.repo, "show", "exp", env=full_disk.env).returncode == 0  # synced
    sessions = full_disk.disk / "state" / "sessions"
    before = sorted(p.name for p in sessions.iterdir())
    full_disk.fill()
    done = gitsess(full_disk.repo, "fork", "exp", "copy", env=full_disk.env)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "no space" in done.stderr.lower(), done.stderr
    assert sorted(p.name for p in sessions.iterdir()) == before
    listed = gitsess(full_disk.repo, "ls", env=full_disk.env).stdout
    assert "copy" not in listed
    full_disk.free()
    again = gitsess(full_disk.repo, "fork", "exp", "copy", env=full_disk.env)
    assert again.returncode == 0, again.stderr
    shown = gitsess(full_disk.repo, "fs", "copy", "stat", "big.bin", env=full_disk.env)
    assert shown.returncode == 0, shown.stderr
