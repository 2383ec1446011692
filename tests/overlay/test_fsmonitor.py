"""git's fsmonitor answered by the session's journal must never change what `git status` says."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest

from gitsess.services.live import FSMONITOR_CONFIG, git_config_env
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse


def status(m: Mounted, *, monitored: bool, untracked: str = "all") -> str:
    # The hook finds the daemon in the session dir, `$GITSESS_DIR/sessions/<id>`.
    state = m.spec.session_dir.parent / "state"
    link = state / "sessions" / m.spec.session_id
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(m.spec.session_dir)
    env = {**os.environ, "GITSESS_SESSION_ID": m.spec.session_id, "GITSESS_DIR": str(state)}
    if monitored:
        env.update(git_config_env({}, FSMONITOR_CONFIG))
        env["GIT_TRACE_FSMONITOR"] = str(m.spec.session_dir / "fsmonitor.trace")
        args = ["git", "status", "--porcelain=v2", f"--untracked-files={untracked}"]
    else:
        # A full scan on a copy of the index: it must not strip the fsmonitor token from the
        # index the monitored runs keep using.
        scratch = m.spec.session_dir / "scan.index"
        shutil.copyfile(m.lower / ".git" / "index", scratch)
        env["GIT_INDEX_FILE"] = str(scratch)
        args = ["git", "-c", "core.fsmonitor=", "-c", "core.untrackedCache=false", "status"]
        args += ["--porcelain=v2", f"--untracked-files={untracked}"]
    return subprocess.run(
        args, cwd=m.mnt, env=env, capture_output=True, text=True, check=True
    ).stdout


def agree(m: Mounted, timeout: float = 5.0) -> None:
    """Changes in the worktree reach the journal through the watcher, a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        plain, monitored = status(m, monitored=False), status(m, monitored=True)
        if plain == monitored or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert monitored == plain


def test_fsmonitor_agrees_with_a_full_scan(mounted: Mounted) -> None:
    m, lower = mounted.mnt, mounted.lower
    steps: list[Callable[[], object]] = [
        lambda: (m / "README").write_text("changed in the session\n"),
        lambda: (m / "src" / "new.py").write_text("new\n"),
        lambda: (lower / "src" / "main.py").write_text("edited in the real tree\n"),
        lambda: os.rename(m / "src" / "pkg" / "mod.py", m / "src" / "pkg" / "renamed.py"),
        lambda: os.unlink(m / "link"),
        lambda: os.chmod(m / "README", 0o755),
        lambda: shutil.rmtree(m / "bin"),
        lambda: (lower / "outside.txt").write_text("new in the real tree\n"),
        lambda: os.rename(m / "src", m / "lib"),
        lambda: os.utime(m / "lib" / "main.py", ns=(1, 1)),
    ]
    agree(mounted)
    for step in steps:
        step()
        agree(mounted)
    trace = (mounted.spec.session_dir / "fsmonitor.trace").read_text()
    # The hook really answered, with paths (not only "everything changed").
    assert "fsmonitor_hook.py' returned success" in trace
    assert "fsmonitor_refresh_callback 'README'" in trace


def test_unknown_token_means_everything(mounted: Mounted) -> None:
    from gitsess.overlay.fsmonitor_hook import ask

    session = str(mounted.spec.session_dir)
    mounted.wait_watched()
    reply = ask(session, "stale")
    assert reply is not None
    assert reply[1] is None
    fresh = ask(session, reply[0])
    assert fresh is not None and fresh[1] == []
    (mounted.mnt / "README").write_text("x")
    after = ask(session, fresh[0])
    assert after is not None and after[1] is not None and "README" in after[1]
    mounted.remount()
    again = ask(session, after[0])
    assert again is not None and again[1] is None


def test_a_worktree_edit_made_just_before_a_query_is_in_its_answer(mounted: Mounted) -> None:
    """The watch reports in batches some 30 ms after a change: a query must not answer before
    it has what the worktree saw up to the query (item 6 of issue 41)."""
    from gitsess.overlay.fsmonitor_hook import ask

    session = str(mounted.spec.session_dir)
    mounted.wait_watched()
    first = ask(session, "")
    assert first is not None
    token = first[0]
    for i in range(10):
        (mounted.lower / "src" / "main.py").write_text(f"edit {i}\n")
        reply = ask(session, token)
        assert reply is not None and reply[1] is not None
        assert "src/main.py" in reply[1]
        token = reply[0]


def test_a_file_made_in_the_worktree_shows_in_the_next_status(mounted: Mounted) -> None:
    mounted.wait_watched()
    agree(mounted)
    for i in range(5):
        (mounted.lower / f"new{i}.txt").write_text("made in the real tree\n")
        assert f"? new{i}.txt" in status(mounted, monitored=True)
