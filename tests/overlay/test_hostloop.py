"""The daemon serves FUSE requests itself and runs trio as its guest: neither starves the other."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from gitsess.overlay import mounttable, protocol
from gitsess.runtime import mount
from tests.live_util import eventually
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse


def test_control_requests_are_answered_while_a_client_keeps_the_view_busy(
    mounted: Mounted,
) -> None:
    files = [mounted.mnt / "src" / "main.py", mounted.mnt / "README", mounted.mnt / "bin" / "tool"]
    went_on = threading.Event()
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()
            went_on.set()

    thread = threading.Thread(target=client)
    thread.start()
    try:
        assert went_on.wait(10)
        for _ in range(20):
            assert protocol.status(str(mounted.spec.session_dir)) is not None
            # the client goes on too: requests are served between the control's turns
            went_on.clear()
            assert went_on.wait(5)
    finally:
        done.set()
        thread.join(timeout=30)
    assert (mounted.mnt / "README").read_text() == "readme\n"


def test_a_signal_stops_the_daemon_cleanly(mounted: Mounted) -> None:
    pid = mounted.daemon_pid()
    (mounted.mnt / "new.txt").write_text("kept\n")
    os.kill(pid, signal.SIGTERM)
    assert eventually(lambda: not mounttable.is_mount_point(mounted.mnt), timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and mount.status(mounted.spec.session_dir) is not None:
        time.sleep(0.05)
    assert "unmounted" in mounted.spec.log.read_text()
    mounted.mount()
    assert (mounted.mnt / "new.txt").read_text() == "kept\n"
