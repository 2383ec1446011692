"""A run cannot reach the real state dir or the real tree (issue 37, items 1 and 2): the state
dir is read-only inside, the run has its own PID namespace and /proc, and its mounts are locked."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from gitsess.git.repo import discover
from gitsess.store import db
from tests.live_util import eventually, start_run
from tests.util import GITSESS, gitsess

pytestmark = pytest.mark.fuse

GS = " ".join(shlex.quote(a) for a in GITSESS)


def run(repo: Path, script: str, *extra: str) -> tuple[int, str, str]:
    done = gitsess(repo, "run", "-s", "exp", *extra, "--", "sh", "-c", script)
    return done.returncode, done.stdout, done.stderr


def session_dir(repo: Path, name: str) -> Path:
    shown = json.loads(gitsess(repo, "show", name, "--json").stdout)
    return discover(repo).session_dir(shown["id"])


@pytest.mark.parametrize("extra", [(), ("--read-only",)], ids=["writable", "read-only"])
def test_a_run_cannot_write_the_state_dir(repo: Path, extra: tuple[str, ...]) -> None:
    assert gitsess(repo, "new", "other").returncode == 0
    assert run(repo, "echo work > work.txt")[0] == 0
    other = session_dir(repo, "other")
    assert gitsess(repo, "run", "-s", "other", "--", "sh", "-c", "echo o > o.txt").returncode == 0
    state = repo / ".git" / "gitsess"
    before = sorted(p.name for p in state.iterdir())
    script = (
        "rm -f .git/gitsess/sessions/*/delta.db* 2>/dev/null || echo no-rm; "
        "echo '{}' 2>/dev/null > .git/gitsess/apply-journal.json || echo no-journal; "
        "mkdir .git/gitsess/planted 2>/dev/null || echo no-mkdir; "
        "test -e .git/gitsess/sessions.db && echo still-there"
    )
    code, out, err = run(repo, script, *extra)
    assert code == 0, err
    assert out.split() == ["no-rm", "no-journal", "no-mkdir", "still-there"]
    assert sorted(p.name for p in state.iterdir()) == before
    assert not (state / "apply-journal.json").exists()
    assert (other / "delta.db").exists()
    assert gitsess(repo, "fs", "other", "cat", "o.txt").stdout == "o\n"
    assert gitsess(repo, "fs", "exp", "cat", "work.txt").stdout == "work\n"


def test_a_run_cannot_unseal_its_mounts(repo: Path) -> None:
    """Root inside a run may mount, but what it inherited is locked: the view cannot be taken
    off the worktree, nor the state dir remounted writable."""
    script = (
        "mount -o remount,rw,bind .git/gitsess 2>/dev/null && echo remounted; "
        "umount .git/gitsess 2>/dev/null && echo unmounted-state; "
        f"umount -l {shlex.quote(str(repo))} 2>/dev/null && echo unmounted-view; "
        "touch .git/gitsess/x 2>/dev/null && echo wrote; "
        "cat README.md"
    )
    code, out, err = run(repo, f"echo view > README.md; {script}")
    assert code == 0, err
    assert out.splitlines() == ["view"]
    assert (repo / "README.md").read_text() == "hello\n"
    assert not (repo / ".git" / "gitsess" / "x").exists()


def test_no_outside_process_is_visible(repo: Path) -> None:
    script = (
        'echo escaped > "/proc/$PPID/root$PWD/README.md" 2>/dev/null; '
        'echo "ppid=$PPID"; '
        f"test -e /proc/{os.getpid()} && echo sees-pytest; "
        "ls /proc | grep -c '^[0-9]'"
    )
    code, out, err = run(repo, script)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "ppid=1"  # the run's own init
    assert "sees-pytest" not in lines
    assert int(lines[-1]) <= 4  # init, sh, ls, grep
    assert (repo / "README.md").read_text() == "hello\n"


def test_the_state_is_read_inside_and_written_through_the_daemon(repo: Path) -> None:
    script = (
        f"{GS} kv set k --json 7 && {GS} kv get k && {GS} show --json >/dev/null && "
        f"{GS} ls >/dev/null && echo read"
    )
    code, out, err = run(repo, script)
    assert code == 0, err
    assert out.splitlines() == ["7", "read"]
    assert gitsess(repo, "kv", "exp", "get", "k").stdout == "7\n"


@pytest.mark.parametrize(
    "command", [["rm", "exp", "--force"], ["new", "x"], ["apply", "--worktree"], ["gc"]]
)
def test_commands_that_write_the_state_are_refused_inside(repo: Path, command: list[str]) -> None:
    assert gitsess(repo, "new", "exp").returncode == 0
    code, _, err = run(repo, f"{GS} {shlex.join(command)}")
    assert code == 1
    assert err == (
        f"gitsess: `gitsess {command[0]}` cannot run inside a session's run: the state dir is"
        " read-only there; run it outside the session\n"
    )
    assert gitsess(repo, "show", "exp").returncode == 0


READ_REGISTRY = """
import sys, time
from pathlib import Path
from gitsess.store import db
failed, reads, end = [], 0, time.monotonic() + 3
while time.monotonic() < end:
    try:
        conn = db.connect(Path(sys.argv[1]))
        for _ in range(3):
            conn.execute("SELECT count(*) FROM sessions").fetchall()
        conn.close()
        reads += 1
    except Exception as e:
        failed.append(repr(e))
print(reads, len(failed), failed[:3])
"""


def test_the_registry_is_read_inside_while_outside_commands_open_and_close_it(
    repo: Path,
) -> None:
    """SQLite's first opener of a database rebuilds its `-shm` and its last closer deletes it;
    a reader that cannot write the `-shm` fails in between. The daemon holds the registry open,
    so commands outside never do either while a run reads it (a flaky agent turn hook found
    this: `checkpoint --turn` said the state dir "is on a read-only file system")."""
    registry = discover(repo).registry_path
    assert gitsess(repo, "new", "exp").returncode == 0
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(READ_REGISTRY)} {registry}"
    inside = start_run(repo, "exp", script)
    try:
        cycles = 0
        while inside.poll() is None:
            conn = db.connect(registry)
            conn.execute("SELECT count(*) FROM sessions").fetchall()
            conn.close()
            cycles += 1
        out, err = inside.communicate(timeout=30)
    finally:
        if inside.poll() is None:
            inside.kill()
            inside.wait()
    assert inside.returncode == 0, err
    reads, failures, shown = out.split(" ", 2)
    assert int(reads) > 50 and cycles > 50, (reads, cycles)
    assert failures == "0", shown


def test_another_sessions_delta_is_read_inside(repo: Path) -> None:
    """A session no daemon holds has a delta.db alone (its last closer removed the WAL); read
    inside a run, where nothing can be created beside it, it was "damaged" (`ls`, `show`,
    `fs`), with the advice to `rm --force` it. Its files are not read there: the worktree's
    path shows the run's view, which `fs` showed as the other session's own files."""
    assert gitsess(repo, "new", "other").returncode == 0
    wal = session_dir(repo, "other") / "delta.db-wal"
    done = gitsess(repo, "run", "-s", "other", "--", "sh", "-c", "echo theirs > theirs.txt")
    assert done.returncode == 0, done.stderr
    assert eventually(lambda: not wal.exists())  # its daemon lingers a moment, then closes
    code, out, err = run(repo, f"{GS} show other --json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["status"] == "idle" and not shown["damaged"]
    code, out, err = run(repo, f"echo mine > README.md; {GS} fs other cat README.md")
    assert code == 1 and out == ""
    assert err.startswith("gitsess: session other cannot be read inside this run: ")
    assert err.rstrip().endswith("run this outside the session")
    code, out, err = run(repo, f"{GS} fs exp cat README.md")  # the run's own: its view
    assert (code, out) == (0, "mine\n"), err
