"""Whether a daemon serves a session, asked without connecting to it or taking its lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gitsess.overlay import control


def test_the_lock_says_who_serves_and_asking_takes_nothing(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert not control.serving(d)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gitsess.overlay import control; "
         f"fd = control.hold({d!r}); print(fd is not None, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "True\n"
        for _ in range(3):
            assert control.serving(d)
        # Asking took nothing: a second daemon is still turned away, and the first keeps it.
        assert control.hold(d) is None
        assert control.serving(d)
    finally:
        holder.communicate("")
    assert not control.serving(d)
    fd = control.hold(d)
    assert fd is not None
    os.close(fd)


def test_no_published_name_means_no_daemon(tmp_path: Path) -> None:
    assert control.address(str(tmp_path)) is None
    assert control.connect(str(tmp_path)) is None
    control.publish(str(tmp_path), b"\0gitsess-x-1234")
    assert control.address(str(tmp_path)) == b"\0gitsess-x-1234"
    assert (tmp_path / control.NAME_FILE).stat().st_mode & 0o777 == 0o600
    assert control.connect(str(tmp_path)) is None  # nobody listens on it


def test_the_status_of_a_daemon_of_an_older_install_is_read() -> None:
    """After an upgrade, daemons started before it still serve (and `gc`, `ps` ask every one
    of the user's): a status without the fields added since reads with their defaults."""
    from gitsess.overlay.protocol import DaemonStatus

    older = {
        "daemon_pid": 7, "mountpoint": "/m", "persistent": False, "read_only": False,
        "watched": True, "participants": [],
    }  # fmt: skip
    status = DaemonStatus(older)
    assert (status.daemon_pid, status.watched, status.listing) == (7, True, False)
