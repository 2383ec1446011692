"""The guard: a daemon that dies with a request of its own view in flight still ends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gitsess.overlay import control, guard, mounttable
from gitsess.runtime import mount
from tests.live_util import eventually
from tests.overlay.conftest import Mounted

# Directories, and files in each, that a lookup in the root has listed ahead: long enough that
# a kill soon after the lookup mostly finds a listing thread's request read and unanswered.
DIRS, FILES = 64, 150


def _ended(pid: int) -> bool:
    """Whether `pid` has exited: gone, or a zombie of one thread (a wait that no signal ends
    leaves the zombie leader with its stuck thread)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return True
    return state == "Z" and threads == 1


def _guards_of(pid: int) -> list[int]:
    """The children of `pid` named as guards. A guard names itself once it runs, which on a
    loaded machine may be after its daemon answers: wait for it (`eventually`)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in _read(task / "children").split():
            if _read(Path(f"/proc/{child}/comm")).strip() == "gitsess-guard":
                found.append(int(child))
    return found


def _read(path: Path) -> str:
    """What a /proc file says; nothing once its thread or process is gone."""
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def test_a_daemon_killed_while_it_lists_its_own_view_ends(mounted: Mounted) -> None:
    for d in range(DIRS):
        (mounted.lower / f"d{d}").mkdir()
        for f in range(FILES):
            (mounted.lower / f"d{d}" / f"f{f}").write_bytes(b"")
    _kill_while_listing(mounted)
    mounted.mount()
    _kill_while_listing(mounted)  # once may miss a listing in flight; twice mostly will not


def _kill_while_listing(mounted: Mounted) -> None:
    daemon = mounted.daemon_pid()
    device = mounttable.device_at(str(mounted.mnt))
    assert device is not None
    try:
        # The lookup lists the root and its 64 subdirectories through the view, from threads
        # of the daemon.
        os.stat(mounted.mnt / "d0" / "f1")
        time.sleep(0.03)
        os.kill(daemon, signal.SIGKILL)
        assert eventually(lambda: _ended(daemon), timeout=10)
        assert eventually(lambda: control.connect(str(mounted.spec.session_dir), 1) is None)
    finally:
        if not _ended(daemon):
            guard.abort(device, str(mounted.mnt))  # nothing else would end it
    # What is left (unless the guard's forced unmount took it) answers ENOTCONN: the next
    # mount clears it without waiting.
    mount.clean_stale(mounted.mnt)
    assert not mounttable.is_mount_point(mounted.mnt)


def test_the_guard_ends_with_a_daemon_that_stops(mounted: Mounted) -> None:
    daemon = mounted.daemon_pid()
    assert eventually(lambda: len(_guards_of(daemon)) == 1)
    (guard_pid,) = _guards_of(daemon)
    mounted.unmount()
    assert eventually(lambda: _ended(guard_pid))
    mounted.mount()
    assert (mounted.mnt / "README").read_text() == "readme\n"


def test_abort_does_nothing_without_the_connection(tmp_path: Path) -> None:
    assert mounttable.device_at(str(tmp_path)) is None
    assert not guard.abort("0:999999", str(tmp_path))
