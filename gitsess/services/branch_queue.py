"""One gated apply at a time per branch, in the order they arrived.

A flock alone is not fair (any waiter may get it next), so each comer takes a numbered ticket
under a short flock and waits until its ticket is the lowest of the living: a ticket whose
process is gone (killed while waiting or testing) is removed by whoever sees it first.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gitsess.git.repo import RepoContext
from gitsess.processes import alive
from gitsess.store.db import private_dir

POLL = 0.05  # seconds between looks at the queue: a test run takes far longer


def queue_dir(ctx: RepoContext, branch: str) -> Path:
    return ctx.state_dir / "queues" / hashlib.sha256(branch.encode()).hexdigest()[:16]


@contextmanager
def turn(ctx: RepoContext, branch: str) -> Iterator[None]:
    """Wait for this process's turn on `branch`, hold it for the block."""
    where = queue_dir(ctx, branch)
    private_dir(where)
    ticket = _take_ticket(where)
    try:
        while _first_alive(where) != ticket.name:
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
        ticket = where / f"{number:012d}-{os.getpid()}"
        ticket.touch()
        return ticket
    finally:
        os.close(fd)


def _first_alive(where: Path) -> str | None:
    for name in sorted(n for n in os.listdir(where) if n[:1].isdigit()):
        pid = int(name.partition("-")[2])
        if pid == os.getpid() or alive(pid):
            return name
        (where / name).unlink(missing_ok=True)
    return None
