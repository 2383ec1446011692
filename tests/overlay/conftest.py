"""A real FUSE mount of a session over a real git worktree, torn down even when a test fails."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitsess.overlay import control, mounttable, protocol
from gitsess.runtime import mount
from tests.live_util import eventually
from tests.util import Link, make_repo

pytestmark = pytest.mark.fuse


WORKTREE = {
    "README": "readme\n",
    "src/main.py": "print('hi')\n",
    "src/pkg/mod.py": "x = 1\n",
    "bin/tool": "#!/bin/sh\necho tool\n",
    "link": Link("README"),
}


def make_worktree(path: Path) -> Path:
    return make_repo(path, WORKTREE, executable=("bin/tool",))


@dataclass
class Mounted:
    spec: mount.MountSpec

    @property
    def mnt(self) -> Path:
        return self.spec.target

    @property
    def lower(self) -> Path:
        return self.spec.lower

    def mount(self) -> None:
        mount.ensure_mounted(self.spec)

    def unmount(self) -> None:
        mount.stop(self.spec.session_dir, self.mnt)

    def remount(self) -> None:
        self.unmount()
        self.mount()

    def daemon_pid(self) -> int:
        st = mount.status(self.spec.session_dir)
        assert st is not None
        return st.daemon_pid

    def sync(self) -> None:
        assert mount.sync(self.spec.session_dir)

    def run_while_stopped(self, code: str, *args: str, wait: float) -> bytes | None:
        """The output of `python -c code args...`, run while the daemon is stopped, so that
        only the kernel's caches can answer it; None if it failed or did not end within
        `wait` seconds (a request reached the daemon). The daemon is always continued."""
        pid = self.daemon_pid()
        os.kill(pid, signal.SIGSTOP)
        child = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, cwd="/"
        )
        try:
            out, _ = child.communicate(timeout=wait)
            return out if child.returncode == 0 else None
        except subprocess.TimeoutExpired:
            return None
        finally:
            os.kill(pid, signal.SIGCONT)
            child.communicate(timeout=30)

    def wait_watched(self) -> None:
        """Wait until the lower watch is in place: it then has the kernel forget what it
        learnt before (and until then, the kernel keeps what it learns for a second only)."""

        def watched() -> bool:
            status = protocol.status(str(self.spec.session_dir))
            return status is not None and status.watched

        assert eventually(watched)

    def wait_listed(self) -> None:
        """Wait until no listing ahead is queued or in flight: the kernel then holds what
        they listed, however long a loaded machine took."""

        def listed() -> bool:
            status = protocol.status(str(self.spec.session_dir))
            return status is not None and not status.listing

        assert eventually(listed)


def _teardown(m: Mounted) -> None:
    st = mount.status(m.spec.session_dir)
    try:
        m.unmount()
    finally:
        if st is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(st.daemon_pid, 9)
        if mounttable.is_mount_point(m.mnt):
            mount.unmount(m.mnt)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    return make_worktree(tmp_path / "wt")


@pytest.fixture
def mounted(tmp_path: Path, worktree: Path) -> Iterator[Mounted]:
    session_dir = tmp_path / "session"
    session_dir.mkdir(mode=0o700)
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()), lower=worktree, session_dir=session_dir, persistent=True
    )
    m = Mounted(spec)
    try:
        m.mount()
        yield m
    finally:
        _teardown(m)
        assert control.connect(str(spec.session_dir), timeout=1) is None
