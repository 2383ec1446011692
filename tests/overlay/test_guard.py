"""The guard: a daemon that dies with a request of its own view in flight still ends."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
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
    """The children of `pid` named as guards. A guard has its name once its fork has exec'd the
    program, which on a loaded machine may be after its daemon answers: wait for it
    (`eventually`)."""
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
            _abort(device)  # nothing else would end it
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


def _abort(device: str) -> None:
    with open(f"/sys/fs/fuse/connections/{device.partition(':')[2]}/abort", "w") as f:
        f.write("1")


# A daemon stand-in whose main thread stays after the thread that started the guard ended:
# to the guard, a daemon that died and does not finish exiting (the stuck case).
STUCK = """
import sys, threading, time
from gitsess.overlay import guard
def start():
    tell = guard.start()
    assert guard.arm(tell, sys.argv[1])
    print(flush=True)
    sys.stdin.readline()
threading.Thread(target=start).start()
time.sleep(60)
"""


def test_the_guard_aborts_the_view_of_a_daemon_that_died_stuck(mounted: Mounted) -> None:
    assert os.access(guard.COMPILED, os.X_OK)
    daemon = mounted.daemon_pid()
    stuck = subprocess.Popen(
        [sys.executable, "-c", STUCK, str(mounted.mnt)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert stuck.stdout is not None and stuck.stdout.readline() == "\n"
        # Once its fork has exec'd the program and it waits for its parent's death: the thread
        # that started it ends then.
        assert eventually(lambda: len(_guards_of(stuck.pid)) == 1)
        (guard_pid,) = _guards_of(stuck.pid)
        assert eventually(lambda: "sigtimedwait" in Path(f"/proc/{guard_pid}/wchan").read_text())
        assert stuck.stdin is not None
        stuck.stdin.write("\n")
        stuck.stdin.flush()
        assert eventually(lambda: _ended(guard_pid), timeout=10)
        # The connection was aborted (through fusectl, or by the forced unmount where it is
        # not mounted): the view's daemon saw its end and exited, and the view is gone.
        assert eventually(lambda: _ended(daemon), timeout=10)
        try:
            os.stat(mounted.mnt / "README")
            raise AssertionError("the view is still served")
        except OSError as e:
            assert e.errno in (errno.ENOTCONN, errno.ENOENT)
    finally:
        stuck.kill()
        stuck.wait()
    mount.clean_stale(mounted.mnt)
    assert not mounttable.is_mount_point(mounted.mnt)


def test_the_guard_aborts_a_view_detached_before_it_acts(mounted: Mounted) -> None:
    """A lazy unmount (`fusermount3 -uz`) right after the daemon died leaves no mount to force
    off; the guard aborts the connection through fusectl all the same (mounting it where
    nothing did), and a request waiting for the dead daemon ends."""
    daemon = mounted.daemon_pid()
    stuck = subprocess.Popen(
        [sys.executable, "-c", STUCK, str(mounted.mnt)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    waiting = None
    try:
        assert stuck.stdout is not None and stuck.stdout.readline() == "\n"
        assert eventually(lambda: len(_guards_of(stuck.pid)) == 1)
        (guard_pid,) = _guards_of(stuck.pid)
        assert eventually(lambda: "sigtimedwait" in Path(f"/proc/{guard_pid}/wchan").read_text())
        os.kill(daemon, signal.SIGSTOP)  # it serves nothing now, as a dead one
        waiting = subprocess.Popen(
            [sys.executable, "-c", "import os, sys; os.stat(sys.argv[1])",
             str(mounted.mnt / "never-looked-up")],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert eventually(
            lambda: "request_wait_answer" in Path(f"/proc/{waiting.pid}/wchan").read_text()
        )
        subprocess.run(["fusermount3", "-uz", str(mounted.mnt)], check=True)
        assert stuck.stdin is not None
        stuck.stdin.write("\n")
        stuck.stdin.flush()
        assert eventually(lambda: waiting.poll() is not None, timeout=10)
        assert waiting.returncode != 0
    finally:
        stuck.kill()
        stuck.wait()
        os.kill(daemon, signal.SIGCONT)  # (it answers the request if the guard did not)
        if waiting is not None:
            waiting.wait(timeout=30)
