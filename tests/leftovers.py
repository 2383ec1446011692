"""A pytest plugin: after the whole run, no process the run started may still be alive.

A daemon left behind (a test that timed out before its teardown, a watch process stopped by a
test and never continued) keeps its mount, and can keep the run's output pipe open, so that the
run never ends for whoever reads it. Every process the run starts inherits a marker in its
environment; at the end of the run the processes that still carry it are reported, killed (by
pid: only ours carry the marker) and their mounts below the run's temporary directory lazily
unmounted, and the run fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from gitsess.overlay import mounttable

MARKER = "GITSESS_TEST_RUN"
# Daemons linger a moment after their last participant leaves (gitsess.overlay.daemon.LINGER),
# and a teardown's stop may still be under way in another worker.
GRACE_S = 10.0


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _is_controller(config) and MARKER not in os.environ:
        # Set before xdist starts its workers, which inherit it, as does all they start.
        os.environ[MARKER] = uuid.uuid4().hex


def _marked(value: str) -> list[int]:
    needle = f"{MARKER}={value}".encode()
    own = {os.getpid(), os.getppid()}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in own:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def _describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid}: {' '.join(os.fsdecode(a) for a in argv if a)[:200]}"


def _fuse_mounts_below(top: Path) -> list[str]:
    return [
        m.point
        for m in mounttable.mounts()
        if m.fstype.startswith("fuse") and m.point.startswith(f"{top}/")
    ]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _is_controller(config) or MARKER not in os.environ:
        return
    deadline = time.monotonic() + GRACE_S
    left = _marked(os.environ[MARKER])
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _marked(os.environ[MARKER])
    if not left:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"processes the test run left behind (killed): {len(left)}"]
    lines += [f"  {_describe(pid)}" for pid in left]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    top = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    for point in _fuse_mounts_below(top):
        subprocess.run(["fusermount3", "-uz", point], check=False, capture_output=True)
        lines.append(f"  unmounted {point}")
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
