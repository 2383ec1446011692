"""No daemon outlives its view: one whose mount was lazily detached, or whose session dir was
deleted, stops within seconds (issue 41, item 5)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from gitsess import processes
from gitsess.overlay import control, mounttable
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount, strays
from tests.live_util import eventually
from tests.overlay.conftest import Mounted
from tests.util import gitsess, make_repo

pytestmark = pytest.mark.fuse

# The daemon looks every second (overlay/presence.py); the machine running the tests is loaded.
WITHIN_S = 15.0


def exited(pid: int) -> bool:
    """Gone, or a zombie its parent (this test process) has not reaped yet."""
    try:
        return processes.stat_fields(pid)[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_lazily_unmounted_view_s_daemon_saves_and_exits(mounted: Mounted) -> None:
    (mounted.mnt / "README").write_text("changed in the session\n")
    pid = mounted.daemon_pid()
    # A directory held open keeps the detached view's connection alive: the kernel does not
    # end it, and the daemon used to wait for requests that never came.
    held = os.open(mounted.mnt / "src", os.O_RDONLY | os.O_DIRECTORY)
    try:
        subprocess.run(["fusermount3", "-uz", str(mounted.mnt)], check=True)
        assert not mounttable.is_mount_point(mounted.mnt)
        assert eventually(lambda: exited(pid), timeout=WITHIN_S)
        assert eventually(lambda: not control.serving(str(mounted.spec.session_dir)))
    finally:
        os.close(held)
    with OverlayView(mounted.spec.session_dir / "delta.db", mounted.lower) as view:
        assert view.read("README") == b"changed in the session\n"


def test_a_daemon_whose_session_dir_was_deleted_exits_and_unmounts(
    tmp_path: Path, worktree: Path
) -> None:
    session_dir = tmp_path / "session"
    session_dir.mkdir(mode=0o700)
    mnt = tmp_path / "view"
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()),
        lower=worktree,
        session_dir=session_dir,
        persistent=True,
        mountpoint=mnt,
    )
    m = Mounted(spec)
    m.mount()
    pid = m.daemon_pid()
    try:
        (mnt / "made").write_text("soon gone\n")
        shutil.rmtree(session_dir)
        assert eventually(lambda: exited(pid), timeout=WITHIN_S)
        assert not control.serving(str(spec.session_dir))
        assert not mounttable.is_mount_point(mnt)
    finally:
        if not exited(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        if mounttable.is_mount_point(mnt):
            mount.unmount(mnt)


def test_ps_lists_and_gc_finds_a_stray_daemon(tmp_path: Path, worktree: Path) -> None:
    """A daemon that cannot notice (stopped here, as one stuck would be) is a stray once its
    session dir is gone: `ps` and `gc --dry-run` name it, and `strays.end` ends it. Only this
    test's own stray is ended: the machine's other daemons are not this test's."""
    session_id = str(uuid.uuid4())
    # Where the repository's sessions are: `gc` ends the strays of its repository only.
    session_dir = worktree / ".git" / "gitsess" / "sessions" / session_id
    session_dir.mkdir(mode=0o700, parents=True)
    mnt = tmp_path / "view"
    spec = mount.MountSpec(
        session_id=session_id,
        lower=worktree,
        session_dir=session_dir,
        persistent=True,
        mountpoint=mnt,
    )
    Mounted(spec).mount()
    pid = Mounted(spec).daemon_pid()
    try:
        os.kill(pid, signal.SIGSTOP)
        shutil.rmtree(session_dir)
        found = [s for s in strays.find() if s.pid == pid]
        assert [(s.session_id, s.reason) for s in found] == [
            (spec.session_id, "its session dir was deleted")
        ]
        listed = json.loads(gitsess(worktree, "ps", "--json").stdout)
        assert {"id": spec.session_id, "daemon_pid": pid} in [
            {"id": e["id"], "daemon_pid": e["daemon_pid"]} for e in listed if e["stray"]
        ]
        planned = gitsess(worktree, "gc", "--dry-run")
        assert f"Would end daemon {pid} (session {spec.session_id})" in planned.stdout
        # `ps` says what ends it: a `gc` elsewhere does not (it said "`gitsess gc` ends it")
        line = f"Stray daemon {pid} of session {spec.session_id}: its session dir was deleted"
        assert f"{line} (`gitsess gc` ends it)" in gitsess(worktree, "ps").stdout
        elsewhere = gitsess(make_repo(tmp_path / "other"), "ps").stdout
        assert f"{line} (`gitsess gc` in {worktree / '.git'} ends it)" in elsewhere
        assert not exited(pid)
        strays.end(found[0])
        assert eventually(lambda: exited(pid), timeout=WITHIN_S)
    finally:
        if not exited(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        if mounttable.is_mount_point(mnt):
            mount.unmount(mnt)
