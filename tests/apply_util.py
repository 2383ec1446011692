"""Helpers for tests of diff/apply/discard/archive: real sessions, mounted for real.

Every mount a test makes is stopped in a `finally`, and only the daemon that mount started is
killed if it does not go by itself.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gitsess.cli import main
from gitsess.git.repo import RepoContext
from gitsess.overlay import mounttable
from gitsess.runtime import mount
from gitsess.services import apply, live
from gitsess.store.registry import Session


@dataclass
class Mounted:
    ctx: RepoContext
    session: Session
    mnt: Path

    def write(self, rel: str, data: bytes | str, mode: int | None = None) -> None:
        path = self.mnt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            path.chmod(mode)


@contextlib.contextmanager
def mounted(ctx: RepoContext, session: Session) -> Iterator[Mounted]:
    """The session mounted (as `gitsess mount` does) for the duration."""
    status = live.keep_mounted(ctx, session, mountpoint=None, allow_other=False, read_only=False)
    try:
        yield Mounted(ctx, session, Path(status.mountpoint))
    finally:
        stop(ctx, session, status.daemon_pid)


def stop(ctx: RepoContext, session: Session, daemon_pid: int) -> None:
    """Unmount; kill that daemon if it is still there; clear a mount left behind."""
    try:
        live.unmount(ctx, session)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon_pid, 0)
            time.sleep(0.2)
            os.kill(daemon_pid, 9)
        target = ctx.session_dir(session.id) / "mnt"
        if mounttable.is_mount_point(target):
            mount.unmount(target)


@dataclass
class Cli:
    """The real `main()` in process: exit code, stdout and stderr as a user sees them."""

    capsys: pytest.CaptureFixture[str]

    def __call__(self, *args: str, code: int = 0) -> tuple[str, str]:
        self.capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(list(args))
        out, err = self.capsys.readouterr()
        assert exited.value.code == code, (
            f"gitsess {' '.join(args)}: {exited.value.code}\n{out}{err}"
        )
        return out, err


def changes_left(ctx: RepoContext, session: Session) -> list[str]:
    """The paths a session still changes, ignored ones included."""
    result, _ = apply.diff(ctx, session, include_ignored=True)
    return result.name_only()
