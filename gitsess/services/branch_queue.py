"""One gated apply at a time per branch, in the order they arrived.

A flock alone is not fair (any waiter may get it next), so each comer takes a numbered ticket
under a short flock and waits until its ticket is the lowest of the living. A ticket names its
process by pid and start time, so that one whose process is gone (killed while waiting or
testing), or whose pid now names another process, is removed by whoever sees it first: a dead
waiter never blocks the queue. A waiter given a `timeout` leaves the queue when it expires.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.processes import stat_fields
from gitsess.store.db import private_dir

POLL = 0.05  # seconds between looks at the queue: a test run takes far longer


def queue_dir(ctx: RepoContext, branch: str) -> Path:
    return ctx.state_dir / "queues" / hashlib.sha256(branch.encode()).hexdigest()[:16]


@contextmanager
def turn(ctx: RepoContext, branch: str, timeout: float | None = None) -> Iterator[None]:
    """Wait for this process's turn on `branch` (at most `timeout` seconds, then an error),
    hold it for the block."""
    where = queue_dir(ctx, branch)
    private_dir(where)
    ticket = _take_ticket(where)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while (first := _first_alive(where)) != ticket.name:
            if deadline is not None and time.monotonic() >= deadline:
                holder = "?" if first is None else first.split("-")[1]
                raise GitsessError(
                    f"gave up after waiting {timeout:g} s for a turn on {branch} (the gated "
                    f"apply of process {holder} is ahead); nothing was applied"
                )
            time.sleep(POLL)
        yield
    finally:
        ticket.unlink(missing_ok=True)


def _take_ticket(where: Path) -> Path:
    fd = os.open(where / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        last = os.read(fd, 32).decode() or "0"
        number = int(last) + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(number).encode())
        ticket = where / f"{number:012d}-{os.getpid()}-{_started(os.getpid())}"
        ticket.touch()
        return ticket
    finally:
        os.close(fd)


def _started(pid: int) -> str:
    """The process's start time (clock ticks after boot): with the pid, it names one process.
    A zombie is gone: it waits only for its parent to read its exit status."""
    try:
        fields = stat_fields(pid)
    except OSError:
        return "gone"
    return "gone" if fields[0] == "Z" else fields[19]


def _first_alive(where: Path) -> str | None:
    for name in sorted(n for n in os.listdir(where) if n[:1].isdigit()):
        pid, _, started = name.partition("-")[2].partition("-")
        if pid.isdigit() and _started(int(pid)) == started:
            return name
        (where / name).unlink(missing_ok=True)
    return None
