"""Fifty sessions of one repository mounted at once, each written in and applied: nothing leaks
(issue 41). Slow: fifty daemons on a loaded machine take minutes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitsess import processes
from gitsess.git.repo import RepoContext
from gitsess.overlay import mounttable, protocol
from gitsess.runtime import mount
from gitsess.services import live, sessions
from gitsess.store.registry import Session
from tests.apply_util import Cli
from tests.live_util import eventually

pytestmark = [pytest.mark.fuse, pytest.mark.slow]

SESSIONS = 50


def family(pid: int) -> set[int]:
    """`pid` and every process below it (a daemon's guard and watch)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
    return found


def running(pid: int) -> bool:
    try:
        return processes.stat_fields(pid)[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass
class Fleet:
    mounted: list[tuple[Session, protocol.DaemonStatus]]
    fds: set[str]  # this process's descriptors before the first mount


@pytest.fixture
def fleet(ctx: RepoContext) -> Iterator[Fleet]:
    f = Fleet([], set(os.listdir("/proc/self/fd")))
    try:
        for i in range(SESSIONS):
            session = sessions.create(ctx, f"s{i}")
            status = live.keep_mounted(
                ctx, session, mountpoint=None, allow_other=False, read_only=False
            )
            f.mounted.append((session, status))
        yield f
    finally:
        for session, status in f.mounted:
            with contextlib.suppress(Exception):
                live.unmount(ctx, session)
            for pid in family(status.daemon_pid):
                if running(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, 9)
            if mounttable.is_mount_point(status.mountpoint):
                mount.unmount(Path(status.mountpoint))


@pytest.mark.timeout(1200)
def test_fifty_sessions_written_and_applied_leave_nothing_behind(
    ctx: RepoContext, repo: Path, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(capsys)
    mounted = fleet.mounted
    # One daemon per session, each with its guard and its worktree watch.
    assert len({st.daemon_pid for _, st in mounted}) == SESSIONS
    daemons = set().union(*(family(st.daemon_pid) for _, st in mounted))
    for i, (_, status) in enumerate(mounted):
        (Path(status.mountpoint) / f"made-{i}.txt").write_text(f"session {i}\n")
    for i, (session, _) in enumerate(mounted):
        cli("apply", session.name, "--worktree")
        assert (repo / f"made-{i}.txt").read_text() == f"session {i}\n"
    for session, _ in mounted:
        assert live.unmount(ctx, session)
    assert eventually(lambda: not any(running(p) for p in daemons), timeout=60)
    points = {st.mountpoint for _, st in mounted}
    assert not [m for m in mounttable.mounts() if m.point in points]
    assert set(os.listdir("/proc/self/fd")) <= fleet.fds
