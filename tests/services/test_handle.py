"""`SessionHandle`: one session as a command holds it (its row, its dir, its view)."""

from __future__ import annotations

from pathlib import Path

from gitsess.git.repo import RepoContext
from gitsess.overlay import layout
from gitsess.services import live, sessions
from gitsess.services.handle import SessionHandle
from tests.util import git, gitsess


def test_the_layout_is_the_one_the_daemon_and_the_mount_use(ctx: RepoContext) -> None:
    session = sessions.create(ctx, "exp")
    handle = SessionHandle(ctx, session)
    spec = live.spec_for(ctx, session)
    assert handle.dir == spec.session_dir == ctx.session_dir(session.id)
    assert handle.delta == spec.delta == layout.delta(handle.dir)
    assert handle.daemon_log == spec.log
    assert handle.mountpoint() == spec.target  # not mounted: the session dir's own mount point
    assert SessionHandle.of(ctx, handle) is handle


def test_set_base_moves_the_row_and_leaves_a_removed_session_alone(ctx: RepoContext) -> None:
    session = sessions.create(ctx, "exp")
    handle = SessionHandle(ctx, session)
    git(session.worktree, "commit", "-q", "--allow-empty", "-m", "next")
    head = git(session.worktree, "rev-parse", "HEAD")
    assert session.base_commit != head
    handle.set_base(head)
    assert handle.row.base_commit == head == sessions.resolve(ctx, "exp").base_commit
    sessions.remove(ctx, "exp")
    handle.set_base("0" * 40)  # removed meanwhile: nothing to move, and no error
    assert handle.row.base_commit == head
    assert handle.reread() == handle.row  # gone from the registry: kept as it was


def test_a_view_reads_what_a_live_session_wrote(
    ctx: RepoContext, repo: Path, tmp_path: Path
) -> None:
    sessions.create(ctx, "exp")
    mountpoint = tmp_path / "view"
    mountpoint.mkdir()
    assert gitsess(repo, "mount", "exp", str(mountpoint)).returncode == 0
    try:
        handle = SessionHandle.resolve(ctx, "exp")
        assert handle.status() is not None
        assert handle.mountpoint() == mountpoint
        (mountpoint / "made.txt").write_text("made\n")
        with handle.view() as view:  # the daemon committed it first
            entry = view.entry("made.txt")
        assert entry is not None and entry.size == len("made\n")
    finally:
        gitsess(repo, "umount", "exp")
