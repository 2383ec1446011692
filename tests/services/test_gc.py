"""`gitsess gc`: the same sweeps as the hooks, on demand, in a repository without hooks, plus
dead mounts, orphaned session dirs and old archives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import discover
from gitsess.overlay import mounttable
from gitsess.runtime import mount
from gitsess.services.gc import parse_age
from tests.live_util import eventually
from tests.sweep_util import (
    archived,
    archives,
    assert_clean,
    run_in,
    session,
    sessions_of,
    stop_everything,
)
from tests.util import commit, git, gitsess


@pytest.fixture
def repo(repo: Path) -> Iterator[Path]:
    """The shared repository, without gitsess's hooks: gc alone has to find everything."""
    try:
        yield repo
    finally:
        stop_everything(repo)


@pytest.mark.fuse
def test_a_session_whose_worktree_moved_says_how_to_get_it_back(repo: Path, tmp_path: Path) -> None:
    """`git worktree move` leaves the session bound to a path that is gone: a run there said
    only that, with no way on."""
    linked, moved = tmp_path / "linked", tmp_path / "moved"
    git(repo, "worktree", "add", "-q", str(linked), "-b", "side")
    run_in(linked, "mv", "echo m > m.txt", cwd=linked)
    git(repo, "worktree", "move", str(linked), str(moved))
    done = gitsess(moved, "run", "-s", "mv", "--", "true")
    assert done.returncode == 1
    assert done.stderr == (
        f"gitsess: session mv is bound to {linked}, which no longer exists: `gitsess gc` "
        "archives the session, and `gitsess restore mv` run in a worktree brings it back there\n"
    )
    assert gitsess(moved, "gc").returncode == 0
    assert gitsess(moved, "restore", "mv").returncode == 0
    back = run_in(moved, "mv", "cat m.txt", cwd=moved)
    assert back.stdout == "m\n"


@pytest.mark.fuse
def test_gc_finds_what_no_hook_saw(repo: Path, tmp_path: Path) -> None:
    run_in(repo, "gone", "echo G > g.txt", "--worktree")
    git(repo, "worktree", "remove", str(session(repo, "gone").worktree))
    assert gitsess(repo, "new", "deleted", "--worktree").returncode == 0
    git(session(repo, "deleted").worktree, "checkout", "-q", "--detach")
    git(repo, "branch", "-D", "gitsess/deleted")
    assert gitsess(repo, "new", "merged", "--worktree").returncode == 0
    commit(session(repo, "merged").worktree, "m.txt", "m\n")
    git(repo, "merge", "-q", "--no-edit", "gitsess/merged")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), "-b", "side")
    assert gitsess(linked, "new", "det").returncode == 0
    git(linked, "checkout", "-q", "-b", "side2")
    assert gitsess(repo, "new", "stale").returncode == 0
    assert gitsess(repo, "mount", "stale").returncode == 0
    status = mount.status(discover(repo).session_dir(session(repo, "stale").id))
    assert status is not None
    os.kill(status.daemon_pid, signal.SIGKILL)
    stale_mount = discover(repo).session_dir(session(repo, "stale").id) / "mnt"
    assert eventually(
        lambda: mount.status(discover(repo).session_dir(session(repo, "stale").id)) is None
    )
    sessions_dir = discover(repo).sessions_dir
    orphan = sessions_dir / str(uuid.uuid4())
    orphan.mkdir()
    (orphan / "delta.db").write_bytes(b"")
    foreign = sessions_dir / "not-a-session"
    foreign.mkdir()

    dry = gitsess(repo, "gc", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = {(a["sweep"], a["verb"], a["name"], a["done"]) for a in json.loads(dry.stdout)}
    assert planned == {
        ("stale-mount", "unmount", str(stale_mount), False),
        ("worktree-gone", "remove", "gone", False),
        ("branch-gone", "remove", "deleted", False),
        ("merged", "remove", "merged", False),
        ("detached", "mark-detached", "det", False),
        ("orphan-dir", "delete", str(orphan), False),
    }
    assert set(sessions_of(repo)) == {"gone", "deleted", "merged", "det", "stale"}
    assert mounttable.is_mount_point(stale_mount) and orphan.exists()

    done = gitsess(repo, "gc")
    assert done.returncode == 0, done.stderr
    assert "Removed session gone: its worktree" in done.stdout
    assert "unapplied changes archived as refs/gitsess/archive/gone" in done.stdout
    assert set(sessions_of(repo)) == {"det", "stale"}
    assert session(repo, "det").state == "detached"
    assert archived(repo, "gone", "g.txt") == "G"
    assert not mounttable.is_mount_point(stale_mount) and not orphan.exists()
    assert foreign.exists()  # not named like a session: not gitsess's to delete
    foreign.rmdir()
    assert_clean(repo)
    assert gitsess(repo, "gc").stdout.strip() == "Nothing to collect."


def _archive(repo: Path, name: str, date: str) -> str:
    """An archive ref as `gitsess rm` makes them (trailers name the session), dated `date`."""
    message = f"gitsess archive of session {name}\n\nGitsess-Session: {uuid.uuid4()}\n"
    message += f"Gitsess-Name: {name}\n"
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    done = subprocess.run(
        ["git", "commit-tree", tree, "-p", "HEAD", "-m", message],
        cwd=repo,
        env={**os.environ, "GIT_COMMITTER_DATE": date},
        capture_output=True,
        text=True,
        check=True,
    )
    ref = f"refs/gitsess/archive/{name}"
    git(repo, "update-ref", ref, done.stdout.strip())
    return ref


def test_old_archives_expire(repo: Path) -> None:
    old = _archive(repo, "old", "2020-01-01T00:00:00Z")
    new = _archive(repo, "new", git(repo, "log", "-1", "--format=%cI"))
    dry = gitsess(repo, "gc", "--dry-run")
    assert f"Would delete archive {old}:" in dry.stdout
    assert gitsess(repo, "gc", "-n").stdout == dry.stdout  # as apply's -n
    assert archives(repo) == [new, old]
    git(repo, "config", "gitsess.gc.archiveMaxAge", "never")
    assert gitsess(repo, "gc").stdout.strip() == "Nothing to collect."
    git(repo, "config", "gitsess.gc.archiveMaxAge", "soon")
    refused = gitsess(repo, "gc")
    assert refused.returncode == 1
    assert refused.stderr == (
        "gitsess: gitsess.gc.archiveMaxAge = 'soon': give an age such as '30 days', '2.weeks' "
        "or 'never'\n"
    )
    git(repo, "config", "--unset", "gitsess.gc.archiveMaxAge")
    done = gitsess(repo, "gc")
    assert f"Deleted archive {old}:" in done.stdout
    assert archives(repo) == [new]
    assert not discover(repo).state_dir.exists()  # gc created nothing


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("30", timedelta(days=30)),
        ("30 days", timedelta(days=30)),
        ("2.weeks.ago", timedelta(weeks=2)),
        ("12h", timedelta(hours=12)),
        ("1 month", timedelta(days=30)),
        ("90 minutes", timedelta(minutes=90)),
        ("now", timedelta(0)),
        ("never", None),
    ],
)
def test_archive_max_age_values(text: str, age: timedelta | None) -> None:
    assert parse_age(text) == age


def test_bad_archive_max_age() -> None:
    with pytest.raises(GitsessError, match="archiveMaxAge"):
        parse_age("3 fortnights")
