"""Concurrency, full disks and listings under change, on a real mount."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from gitsess.runtime import mount
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse

WRITER = """
import os, sys
path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
for i in range(count):
    os.write(fd, f"{tag}:{i:05d}\\n".encode())
os.close(fd)
own = os.path.join(os.path.dirname(path), f"own-{tag}")
with open(own, "wb") as f:
    for i in range(count):
        f.write(f"{tag}{i}".encode() * 10)
"""


def _four_writers(root: Path) -> None:
    procs = [
        subprocess.Popen(["python3", "-c", WRITER, str(root / "shared.log"), tag, "400"])
        for tag in "abcd"
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0


def test_four_writers_match_ext4(mounted: Mounted, tmp_path: Path) -> None:
    native = tmp_path / "native"
    native.mkdir()
    _four_writers(mounted.mnt)
    _four_writers(native)
    for tag in "abcd":
        assert (mounted.mnt / f"own-{tag}").read_bytes() == (native / f"own-{tag}").read_bytes()
    view_lines = (mounted.mnt / "shared.log").read_text().splitlines()
    native_lines = (native / "shared.log").read_text().splitlines()
    # Interleaving differs run to run; every appended line must be there whole, once.
    assert sorted(view_lines) == sorted(native_lines)
    assert len(view_lines) == 1600


def _list_while_removing(
    m: Mounted, victims: Callable[[list[str]], list[str]], meanwhile: Callable[[], None]
) -> tuple[list[str], list[str]]:
    """Read a lower directory of 600 names through the view, removing `victims(names)` and
    then running `meanwhile` after the first few; returns (names, what the reader saw)."""
    d = m.lower / "many"
    d.mkdir()
    names = sorted(f"f{i:04d}" for i in range(600))
    for name in names:
        (d / name).write_text(name)
    seen: list[str] = []
    with os.scandir(m.mnt / "many") as it:
        for i, entry in enumerate(it):
            seen.append(entry.name)
            if i == 10:
                for victim in victims(names):
                    os.unlink(m.mnt / "many" / victim)
                meanwhile()
    # POSIX leaves open whether names removed meanwhile show up; none that stays may be
    # skipped, and none may come twice.
    assert len(seen) == len(set(seen))
    return names, seen


def test_listing_stays_whole_while_entries_go(mounted: Mounted) -> None:
    names, seen = _list_while_removing(mounted, lambda names: names[300:], lambda: None)
    assert set(names[:300]) <= set(seen)
    assert len(os.listdir(mounted.mnt / "many")) == 300


def test_listing_resumes_after_another_reader_restarted_it(mounted: Mounted) -> None:
    def second_reader() -> None:
        # It lists the directory anew, from its first entry, while the first reader is halfway.
        assert len(os.listdir(mounted.mnt / "many")) == 300

    names, seen = _list_while_removing(mounted, lambda names: names[::2], second_reader)
    assert set(names[1::2]) <= set(seen)


@pytest.fixture
def tiny_disk(tmp_path: Path, worktree: Path) -> Iterator[Mounted]:
    """A session whose delta.db sits on a 3 MiB tmpfs."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True)
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()),
        lower=worktree,
        session_dir=disk,
        persistent=True,
        mountpoint=tmp_path / "mnt",
    )
    m = Mounted(spec)
    try:
        m.mount()
        yield m
    finally:
        m.unmount()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_full_disk_gives_enospc_and_a_consistent_delta(tiny_disk: Mounted) -> None:
    (tiny_disk.mnt / "small").write_bytes(b"s" * 1000)
    fd = os.open(tiny_disk.mnt / "small", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    with pytest.raises(OSError) as info, open(tiny_disk.mnt / "big", "wb") as f:
        for _ in range(80):
            f.write(os.urandom(64 * 1024))
            os.fsync(f.fileno())
    assert info.value.errno == errno.ENOSPC
    conn = apsw.Connection(str(tiny_disk.spec.delta), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert list(conn.execute("PRAGMA integrity_check")) == [("ok",)]
    finally:
        conn.close()
    assert (tiny_disk.mnt / "small").read_bytes() == b"s" * 1000
    os.unlink(tiny_disk.mnt / "big")
    (tiny_disk.mnt / "after").write_text("room again")
    assert (tiny_disk.mnt / "after").read_text() == "room again"


def test_state_dir_is_hidden_from_a_mounted_view(mounted: Mounted, tmp_path: Path) -> None:
    hidden_spec = mount.MountSpec(
        session_id=str(uuid.uuid4()),
        lower=mounted.lower,
        session_dir=mounted.lower / ".git" / "gitsess-test",
        hidden=(".git/gitsess-test",),
        persistent=True,
    )
    hidden_spec.session_dir.mkdir()
    m = Mounted(hidden_spec)
    try:
        m.mount()
        assert "gitsess-test" not in os.listdir(m.mnt / ".git")
        # Found by name (`gitsess run` binds the real one over it), but empty and fixed.
        stand_in = m.mnt / ".git" / "gitsess-test"
        assert stand_in.is_dir() and os.listdir(stand_in) == []
        for attempt in (
            lambda: (stand_in / "x").write_text("x"),
            lambda: stand_in.rmdir(),
            lambda: stand_in.rename(m.mnt / "elsewhere"),
            lambda: os.chmod(stand_in, 0o777),
        ):
            with pytest.raises(OSError):
                attempt()
        assert "HEAD" in os.listdir(m.mnt / ".git")
        found = subprocess.run(
            ["find", str(m.mnt)], capture_output=True, text=True, timeout=60, check=True
        )
        inside = [line[len(str(m.mnt)) :] for line in found.stdout.splitlines()]
        assert "/.git/HEAD" in inside
        assert not [p for p in inside if "gitsess-test" in p]
        subprocess.run(["rm", "-rf", str(m.mnt / ".git")], capture_output=True)
        # objects are the session's own too: only the sealed stand-in is left, unlisted
        assert os.listdir(m.mnt / ".git") == []
        with pytest.raises(OSError):
            (m.mnt / ".git").rmdir()
        assert (mounted.lower / ".git" / "gitsess-test" / "delta.db").is_file()
    finally:
        m.unmount()
