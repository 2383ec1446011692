"""Small things a user trips over (issue 29 item 18)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gitsess.overlay import control
from tests.live_util import eventually
from tests.util import commit, gitsess

pytestmark = pytest.mark.fuse


def test_run_names_a_session_it_creates(repo: Path) -> None:
    first = gitsess(repo, "run", "-s", "tpyo", "--", "true")
    assert first.returncode == 0
    assert "new session tpyo" in first.stderr
    again = gitsess(repo, "run", "-s", "tpyo", "--", "true")
    assert "new session" not in again.stderr


def test_a_command_not_found_is_127_and_leaves_no_session(repo: Path) -> None:
    done = gitsess(repo, "run", "-s", "nothing", "--", "no-such-command-here")
    assert done.returncode == 127
    assert "command not found: no-such-command-here" in done.stderr
    assert "nothing" not in gitsess(repo, "ls").stdout
    assert gitsess(repo, "run", "-s", "kept", "--", "true").returncode == 0
    assert gitsess(repo, "run", "-s", "kept", "--", "no-such-command-here").returncode == 127
    assert "kept" in gitsess(repo, "ls").stdout  # one it did not make stays


def test_a_link_in_the_sessions_dir_is_removed_not_followed(repo: Path, tmp_path: Path) -> None:
    assert gitsess(repo, "run", "-s", "exp", "--", "true").returncode == 0
    target = tmp_path / "precious"
    target.mkdir()
    (target / "file").write_text("keep\n")
    link = repo / ".git" / "gitsess" / "sessions" / "11111111-1111-1111-1111-111111111111"
    link.symlink_to(target)
    done = gitsess(repo, "gc")
    assert done.returncode == 0, done.stderr
    assert not link.exists() and (target / "file").read_text() == "keep\n"
    assert gitsess(repo, "gc").returncode == 0


def test_a_deleted_session_dir_is_one_clear_line(repo: Path) -> None:
    assert gitsess(repo, "run", "-s", "exp", "--", "true").returncode == 0
    session_id = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["id"]
    session_dir = repo / ".git" / "gitsess" / "sessions" / session_id
    # the daemon lingers a moment after the run: never delete through its live view, nor
    # while it still closes delta.db (which deletes its -wal) after the unmount
    assert eventually(lambda: not os.path.ismount(session_dir / "mnt"))
    assert eventually(lambda: not control.serving(str(session_dir)))
    shutil.rmtree(session_dir)
    done = gitsess(repo, "run", "-s", "exp", "--", "true")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "is gone" in done.stderr
    assert "mount.lock" not in done.stderr
    assert gitsess(repo, "rm", "exp").returncode == 0


_KILLED_BEFORE_RENAME = """
import os, sys
real = os.replace
def dying(src, dst, *a, **k):
    if ".new.txt.gitsess-" in str(src):
        os.kill(os.getpid(), 9)  # the real file written aside, never renamed in
    return real(src, dst, *a, **k)
os.replace = dying
from gitsess.cli import main
main(sys.argv[1:])
"""


def test_gc_completes_a_killed_apply_and_removes_what_it_left(repo: Path) -> None:
    assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo new > new.txt").returncode == 0
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BEFORE_RENAME, "apply", "exp", "--worktree"],
        cwd=repo, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    assert [p.name for p in repo.glob(".new.txt.gitsess-*.tmp")] != []
    done = gitsess(repo, "gc")
    assert done.returncode == 0, done.stderr
    assert list(repo.glob(".*.gitsess-*.tmp")) == []
    assert (repo / "new.txt").read_text() == "new\n"


def test_show_pads_no_line(repo: Path) -> None:
    assert gitsess(repo, "new", "exp", "-t", ("a title " * 12).strip()).returncode == 0
    out = gitsess(repo, "show", "exp", env={"COLUMNS": "200"}).stdout
    lines = out.splitlines()
    assert len(lines) > 10
    assert all(line == line.rstrip() for line in lines)
    assert any(line.startswith("name ") and line.endswith("exp") for line in lines)


def test_a_patch_to_a_device_is_written_to_it_not_renamed_over(repo: Path, tmp_path: Path) -> None:
    """`-o /dev/null` as root had replaced /dev/null with a regular file."""
    assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo x > x.txt").returncode == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    done = gitsess(repo, "apply", "exp", "--patch", "-o", str(fifo))
    assert done.returncode == 0, done.stderr
    assert b"+x" in reader.communicate(timeout=30)[0]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert list(tmp_path.glob(".fifo.gitsess-*")) == []


def _session_removes(repo: Path, tmp_path: Path, *names: str) -> None:
    view = tmp_path / "view"
    view.mkdir(exist_ok=True)
    assert gitsess(repo, "new", "exp").returncode == 0
    assert gitsess(repo, "mount", "exp", str(view)).returncode == 0
    try:
        for name in names:
            (view / name).unlink()
    finally:
        assert gitsess(repo, "umount", "exp").returncode == 0


@pytest.mark.parametrize("target", ["--worktree", "--commit"])
def test_a_removal_never_takes_a_real_edit_made_after_it(
    repo: Path, tmp_path: Path, target: str
) -> None:
    """The session removed two files; one was edited in the real tree afterwards (not
    committed): applying must not remove that edit, and says why in one line."""
    commit(repo, "edited.txt", "v1\n")
    commit(repo, "untouched.txt", "same\n")
    _session_removes(repo, tmp_path, "edited.txt", "untouched.txt")
    (repo / "edited.txt").write_text("edited outside after the session removed it\n")
    done = gitsess(repo, "apply", "exp", target, *(["-m", "rm"] if target == "--commit" else []))
    assert done.returncode == 1
    assert "edited.txt: removed in the session, but the real file may have changed" in done.stderr
    assert (repo / "edited.txt").read_text() == "edited outside after the session removed it\n"
    assert (repo / "untouched.txt").exists()
    forced = gitsess(repo, "apply", "exp", "--worktree", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (repo / "edited.txt").exists() and not (repo / "untouched.txt").exists()


def test_a_file_edited_before_the_session_removed_it_is_removed(repo: Path, tmp_path: Path) -> None:
    commit(repo, "old.txt", "v1\n")
    (repo / "old.txt").write_text("an edit the session saw\n")
    _session_removes(repo, tmp_path, "old.txt")
    done = gitsess(repo, "apply", "exp", "--worktree")
    assert done.returncode == 0, done.stderr
    assert not (repo / "old.txt").exists()


def test_a_merge_conflict_says_which_side_removed(repo: Path, tmp_path: Path) -> None:
    commit(repo, "gone.txt", "v1\n")
    _session_removes(repo, tmp_path, "gone.txt")
    commit(repo, "gone.txt", "v2 on the branch\n")
    done = gitsess(repo, "apply", "exp", "--commit", "-m", "rm")
    assert done.returncode == 1
    assert "gone.txt: removed in the session, changed on the branch (merge)" in done.stderr


def test_arguments_that_would_do_nothing_or_too_much_are_refused(
    repo: Path, tmp_path: Path
) -> None:
    """Issue 37 item 15: an empty --branch, a rename to the name it has, a mount point that
    does not exist."""
    assert gitsess(repo, "run", "-s", "base", "--", "sh", "-c", "echo x > x.txt").returncode == 0
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    done = gitsess(repo, "apply", "base", "--commit", "--branch", "", "-m", "m")
    assert (done.returncode, done.stderr) == (
        1,
        "gitsess: --branch '' is not a valid branch name\n",
    )
    again = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert again.stdout == head.stdout
    renamed = gitsess(repo, "rename", "base", "-1")
    assert (renamed.returncode, renamed.stderr) == (
        1,
        "gitsess: session base is already named base\n",
    )
    missing = tmp_path / "nonexistent" / "dir"
    mounted = gitsess(repo, "mount", "base", str(missing))
    assert mounted.returncode == 1
    assert (
        mounted.stderr == f"gitsess: mount point {missing} is not a directory (create it first)\n"
    )
    assert not missing.parent.exists()


def test_an_unreadable_registry_is_said_so_not_taken_for_a_path(repo: Path) -> None:
    """Issue 37 item 14: `diff s` / `apply s --patch` when the registry cannot be read."""
    assert gitsess(repo, "new", "s").returncode == 0
    registry = repo / ".git" / "gitsess" / "sessions.db"
    for extra in ("-wal", "-shm"):
        Path(f"{registry}{extra}").unlink(missing_ok=True)
    registry.write_bytes(b"this is not a database, not at all" * 200)
    for args in (["diff", "s"], ["apply", "s", "--patch"]):
        done = gitsess(repo, *args)
        assert done.returncode == 1
        assert "neither a session nor a path" not in done.stderr, done.stderr
        assert "sessions.db" in done.stderr, done.stderr
