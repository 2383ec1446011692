"""Helpers for tests of the git hooks and gc: sessions made with real runs, and the checks that
must hold after every scenario (nothing mounted, no daemon, no orphan, nothing lost)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gitsess.git.repo import discover
from gitsess.overlay import mounttable
from gitsess.runtime import mount
from gitsess.store.registry import Registry, Session

from .live_util import eventually
from .util import git, gitsess

# The hooks start the gitsess of the tests' own interpreter, by absolute path.
HOOK_COMMAND = f"{sys.executable} -m gitsess"


def run_in(
    repo: Path, name: str, script: str, *extra: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`gitsess run -s NAME [EXTRA] -- sh -c SCRIPT`, which must succeed."""
    done = gitsess(cwd or repo, "run", "-s", name, *extra, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done


def sessions_of(repo: Path) -> dict[str, Session]:
    registry = Registry.open(discover(repo).registry_path, create=False)
    if registry is None:
        return {}
    try:
        return {s.name: s for s in registry.all()}
    finally:
        registry.close()


def session(repo: Path, name: str) -> Session:
    found = sessions_of(repo).get(name)
    assert found is not None, f"no session {name}"
    return found


def archived(repo: Path, name: str, path: str) -> str:
    """A file of the archive of session `name`."""
    return git(repo, "show", f"refs/gitsess/archive/{name}:{path}")


def archives(repo: Path) -> list[str]:
    out = git(repo, "for-each-ref", "--format=%(refname)", "refs/gitsess/archive")
    return out.splitlines()


def _daemons(state_dir: Path) -> list[int]:
    """Session daemons serving a session of this state dir (started by this test): processes
    other than this one holding a delta.db under it open. Not by command line: a prestarted
    daemon gets its arguments through a pipe."""
    under = os.fsencode(state_dir.resolve()) + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        fds = os.fsencode(entry / "fd")
        try:
            held = [os.readlink(fds + b"/" + fd) for fd in os.listdir(fds)]
        except OSError:
            continue
        if any(p.startswith(under) and p.endswith(b"/delta.db") for p in held):
            found.append(int(entry.name))
    return found


def _mounts(state_dir: Path) -> list[str]:
    return [m.point for m in mounttable.mounts() if str(state_dir) in m.point]


def assert_clean(repo: Path) -> None:
    """No mount, no daemon, no orphaned directory: every session dir, gitsess worktree and git
    worktree entry belongs to a session that is still there."""
    ctx = discover(repo)
    assert eventually(lambda: _mounts(ctx.state_dir) == []), _mounts(ctx.state_dir)
    assert eventually(lambda: _daemons(ctx.state_dir) == []), _daemons(ctx.state_dir)
    rows = sessions_of(repo).values()
    if ctx.sessions_dir.exists():
        assert {d.name for d in ctx.sessions_dir.iterdir()} == {s.id for s in rows}
    if ctx.worktrees_dir.exists():
        assert set(ctx.worktrees_dir.iterdir()) <= {s.worktree for s in rows}
    assert not list(ctx.state_dir.glob("stand-in-*"))
    listing = git(repo, "worktree", "list", "--porcelain")
    assert "prunable" not in listing, listing


def stop_everything(repo: Path) -> None:
    """Teardown, also after a failure: every daemon this test started for `repo` is stopped."""
    ctx = discover(repo)
    if ctx.sessions_dir.exists():
        for session_dir in ctx.sessions_dir.iterdir():
            mount.stop(session_dir, session_dir / "mnt")
    for pid in _daemons(ctx.state_dir):
        os.kill(pid, signal.SIGKILL)
    for mountpoint in _mounts(ctx.state_dir):
        mount.unmount(Path(mountpoint))
