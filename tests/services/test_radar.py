"""The conflict radar (`overlaps`, the mark in `ls`, what `apply --commit` names) and the gated
apply (`apply --commit --test`), on real mounted sessions and real git."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitsess.git.repo import RepoContext
from gitsess.services import branch_queue, overlaps, sessions
from tests.apply_util import Cli, changes_left, mounted
from tests.util import commit, git, snapshot

pytestmark = pytest.mark.fuse


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


def _write(ctx: RepoContext, name: str, files: dict[str, str]) -> None:
    session = sessions.create(ctx, name)
    with mounted(ctx, session) as m:
        for rel, text in files.items():
            m.write(rel, text)


def _state(repo: Path) -> tuple[str, dict[str, bytes | None]]:
    """The refs and the object store: what "nothing written" is checked against."""
    return git(repo, "for-each-ref"), snapshot(repo / ".git" / "objects")


def test_overlaps_reports_shared_paths_and_conflicts_writing_nothing(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    _write(ctx, "alpha", {"README.md": "alpha\n", "a.txt": "a\n"})
    _write(ctx, "beta", {"README.md": "beta\n", "b.txt": "b\n"})
    _write(ctx, "gamma", {"a.txt": "a\n", "c.txt": "c\n"})  # same change as alpha's: merges
    _write(ctx, "delta", {"d.txt": "d\n"})  # shares nothing
    before = _state(repo)
    out, _ = cli("overlaps", "--json")
    found = {(o["name"], o["other"]): o for o in json.loads(out)}
    assert set(found) == {("alpha", "beta"), ("alpha", "gamma")}
    assert found["alpha", "beta"]["paths"] == ["README.md"]
    assert found["alpha", "beta"]["conflicts"] == ["README.md"]
    assert found["alpha", "beta"]["conflict"] is True
    assert found["alpha", "gamma"] == {
        "name": "alpha", "other": "gamma", "kind": "session", "paths": ["a.txt"],
        "conflict": False, "conflicts": [],
    }  # fmt: skip
    assert _state(repo) == before
    out, _ = cli("overlaps")
    assert "alpha and beta both changed 1 path(s): README.md; would conflict on README.md" in out

    listed = {s["name"]: s["conflicts_with"] for s in json.loads(cli("ls", "--json")[0])}
    assert listed == {"alpha": ["beta"], "beta": ["alpha"], "gamma": [], "delta": []}
    out, _ = cli("ls")
    assert "conflicts with beta" in out and "conflicts with alpha" in out


def test_apply_commit_names_the_sessions_it_now_conflicts_with(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    _write(ctx, "alpha", {"README.md": "alpha\n"})
    _write(ctx, "beta", {"README.md": "beta\n"})
    _write(ctx, "gamma", {"other.txt": "x\n"})
    out, _ = cli("apply", "alpha", "--commit", "-m", "alpha", "--json")
    assert json.loads(out)["now_conflicts"] == ["beta"]
    out, err = cli("apply", "gamma", "--commit", "-m", "gamma")
    assert "now conflicts with session(s): beta" in err
    found = overlaps.overlaps(ctx)
    assert [(o.name, o.other, o.kind, o.conflicts) for o in found] == [
        ("beta", "main", "branch", ("README.md",))
    ]


def test_gated_apply_lands_only_a_passing_test(ctx: RepoContext, repo: Path, cli: Cli) -> None:
    _write(ctx, "good", {"feature.txt": "works\n"})
    tip = git(repo, "rev-parse", "main")
    # The test sees the result (the branch's files plus the session's) and a usable .git.
    check = 'test "$(cat feature.txt)" = works && test -f README.md && git log -1 --format=%s'
    out, _ = cli("apply", "good", "--commit", "-m", "feature", "--test", check, "--json")
    data = json.loads(out)
    assert data["ok"] is True and data["test"]["passed"] is True
    assert data["test"]["tip"] == tip and data["test"]["output"] == "feature\n"
    assert git(repo, "log", "-1", "--format=%s") == "feature"
    assert git(repo, "rev-parse", "main^") == tip


def test_the_test_runs_in_a_throwaway_view_of_the_result_over_the_real_worktree(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    commit(repo, ".gitignore", "build/\n")
    commit(repo, "gone.txt", "to be removed\n")
    session = sessions.create(ctx, "viewed")
    with mounted(ctx, session) as m:
        m.write("feature.sh", "#!/bin/sh\necho feature\n", 0o755)
        (m.mnt / "gone.txt").unlink()
    # The real worktree's own state: none of it is the result's, but its ignored build output
    # shows through (the view's lower layer is the worktree itself, not a checkout).
    (repo / "README.md").write_text("uncommitted\n")
    (repo / "scratch.txt").write_text("untracked\n")
    (repo / "build").mkdir()
    (repo / "build" / "cache").write_text("cached\n")
    check = (
        "findmnt -n -o FSTYPE -T .; ./feature.sh; cat README.md build/cache;"
        " ls gone.txt scratch.txt 2>&1 | wc -l; ls .git/gitsess | wc -l;"  # (state dir: empty)
        " git status --porcelain; git log -1 --format=%s"
    )
    out, _ = cli("apply", "viewed", "--commit", "-m", "viewed", "--test", check, "--json")
    data = json.loads(out)
    assert data["test"]["passed"] is True
    assert data["test"]["output"].splitlines() == [
        "fuse.gitsess", "feature", "hello", "cached", "2", "0", "viewed",
    ]  # fmt: skip
    assert git(repo, "show", "--name-status", "--format=", "main").split() == [
        "A", "feature.sh", "D", "gone.txt"
    ]  # fmt: skip
    # the real worktree's own changes are still there
    assert (repo / "scratch.txt").read_text() == "untracked\n"
    assert (repo / "README.md").read_text() == "uncommitted\n"
    assert os.listdir(ctx.state_dir / "trials") == []


def test_a_view_left_by_a_killed_gated_apply_is_removed_by_the_next(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    _write(ctx, "first", {"first.txt": "1\n"})
    _write(ctx, "second", {"second.txt": "2\n"})
    started = repo.parent / "started"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitsess", "apply", "first", "--commit", "-m", "1",
         "--test", f"echo $$ > {started}; exec sleep 600"],
        cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if started.exists() and started.read_text().strip():
                break
            time.sleep(0.05)
        assert len(os.listdir(ctx.state_dir / "trials")) == 1
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(started.read_text()), signal.SIGKILL)  # the test's sleep, left alone
    out, _ = cli("apply", "second", "--commit", "-m", "2", "--test", "true", "--json")
    assert json.loads(out)["ok"] is True
    assert os.listdir(ctx.state_dir / "trials") == []
    assert git(repo, "log", "--format=%s", "-1") == "2"


def test_gated_apply_with_a_failing_test_changes_nothing(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    _write(ctx, "bad", {"README.md": "broken\n"})
    session = sessions.resolve(ctx, "bad")
    before = git(repo, "rev-parse", "main"), (repo / "README.md").read_text()
    out, err = cli(
        "apply", "bad", "--commit", "-m", "x", "--test", "echo checking; exit 3", "--json", code=1
    )
    data = json.loads(out)
    assert data["ok"] is False and data["test"]["exit_code"] == 3
    assert "test failed (exit 3); nothing was applied" in err
    assert (git(repo, "rev-parse", "main"), (repo / "README.md").read_text()) == before
    assert changes_left(ctx, session) == ["README.md"]
    assert git(repo, "for-each-ref", "refs/gitsess/gate") == ""
    # the output is kept, and the run is in the session's log
    assert Path(data["test"]["log"]).read_text() == "checking\n"
    out, _ = cli("log", "bad")
    assert "echo checking; exit 3" in out
    assert f"  test output (kept in {data['test']['log']}):\n  | checking\n" in out


def test_log_shows_the_end_of_a_failed_tests_output(ctx: RepoContext, cli: Cli) -> None:
    _write(ctx, "noisy", {"noisy.txt": "n\n"})
    out, _ = cli("apply", "noisy", "--commit", "-m", "x", "--test", "seq 5000; exit 1", "--json",
                 code=1)  # fmt: skip
    log = json.loads(out)["test"]["log"]
    assert Path(log).read_text() == "".join(f"{n}\n" for n in range(1, 5001))  # all kept
    out, _ = cli("log", "noisy")
    shown = [line for line in out.splitlines() if line.startswith("  | ")]
    assert shown == [f"  | {n}" for n in range(4981, 5001)]
    assert f"  test output (its end; all of it in {log}):" in out
    _write(ctx, "quiet", {"quiet.txt": "q\n"})
    cli("apply", "quiet", "--commit", "-m", "q", "--test", "echo fine")
    out, _ = cli("log", "quiet")
    assert "role test" in out and "test output" not in out  # only a failed test's


def test_gated_apply_tests_again_when_the_branch_moved(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    _write(ctx, "late", {"late.txt": "late\n"})
    marker = repo.parent / "moved-once"
    # The first run of the test moves the real branch (another apply landing meanwhile).
    test = (
        f"if [ ! -e {marker} ]; then touch {marker};"
        f" git -C {repo} commit -q --allow-empty -m meanwhile; fi; test -f late.txt"
    )
    out, _ = cli("apply", "late", "--commit", "-m", "late", "--test", test, "--json")
    data = json.loads(out)
    assert data["ok"] is True and data["test"]["attempts"] == 2
    assert git(repo, "log", "--format=%s", "-3").splitlines() == ["late", "meanwhile", "initial"]


def test_a_tip_that_keeps_moving_applies_nothing(ctx: RepoContext, repo: Path, cli: Cli) -> None:
    _write(ctx, "busy", {"busy.txt": "b\n"})
    session = sessions.resolve(ctx, "busy")
    test = f"git -C {repo} commit -q --allow-empty -m again"
    _, err = cli("apply", "busy", "--commit", "-m", "b", "--test", test, "--retries", "1", code=1)
    assert "main moved during each of 2 test runs; nothing was applied" in err
    assert git(repo, "log", "--format=%s", "-1") == "again"
    assert changes_left(ctx, session) == ["busy.txt"]


def test_test_needs_commit(ctx: RepoContext, cli: Cli) -> None:
    _write(ctx, "p", {"p.txt": "p\n"})
    _, err = cli("apply", "p", "--patch", "--test", "true", code=2)
    assert "--test does not apply to this target" in err


_WAITER = """
import sys, time
from pathlib import Path
from gitsess.git.repo import discover
from gitsess.services import branch_queue
with branch_queue.turn(discover(), "main"):
    with open(sys.argv[2], "a") as f:
        f.write(sys.argv[1] + "\\n")
    time.sleep(float(sys.argv[3]))
"""


Waiter = Callable[[str, float], "subprocess.Popen[bytes]"]


def _tickets(where: Path) -> list[str]:
    return sorted(n for n in os.listdir(where) if n[0].isdigit()) if where.exists() else []


@pytest.fixture
def waiter(repo: Path, ctx: RepoContext) -> Iterator[Waiter]:
    """Starts a process that takes its turn on main (appending LABEL to `order` once it has
    it, then holding it HOLD seconds), returning once its ticket is in the queue."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    where = branch_queue.queue_dir(ctx, "main")
    procs: list[subprocess.Popen[bytes]] = []

    def start(label: str, hold: float) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-c", _WAITER, label, str(repo.parent / "order"), str(hold)]
        proc = subprocess.Popen(argv, cwd=repo, env=env)
        procs.append(proc)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            if any(f"-{proc.pid}-" in t for t in _tickets(where)):
                break
            time.sleep(0.02)
        return proc

    try:
        yield start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _order(repo: Path) -> list[str]:
    path = repo.parent / "order"
    return path.read_text().split() if path.exists() else []


def test_gated_applies_to_one_branch_queue_in_arrival_order(
    repo: Path, ctx: RepoContext, waiter: Waiter
) -> None:
    procs = [waiter(str(n), hold) for n, hold in enumerate((1.0, 0, 0, 0))]
    for p in procs:
        assert p.wait(timeout=30) == 0
    assert _order(repo) == ["0", "1", "2", "3"]
    commit(repo, "unrelated.txt", "x\n")  # the queue left nothing that blocks the next apply
    assert os.listdir(branch_queue.queue_dir(ctx, "main")) == ["lock"]


def test_a_waiter_or_holder_that_dies_does_not_block_the_queue(
    repo: Path, ctx: RepoContext, waiter: Waiter
) -> None:
    holder = waiter("holder", 600)
    dead = waiter("dead", 0)
    last = waiter("last", 0)
    assert _order(repo) == ["holder"]
    dead.kill()  # while waiting
    dead.wait()
    holder.kill()  # while holding, and not reaped: a zombie is gone too
    assert last.wait(timeout=30) == 0
    holder.wait()
    assert _order(repo) == ["holder", "last"]
    assert os.listdir(branch_queue.queue_dir(ctx, "main")) == ["lock"]


def test_a_gated_apply_past_its_queue_timeout_gives_up_and_changes_nothing(
    ctx: RepoContext, repo: Path, cli: Cli, waiter: Waiter
) -> None:
    _write(ctx, "patient", {"patient.txt": "p\n"})
    session = sessions.resolve(ctx, "patient")
    holder = waiter("holder", 600)
    before = _state(repo)
    started = time.monotonic()
    out, err = cli(
        "apply", "patient", "--commit", "-m", "p", "--test", "true", "--queue-timeout", "0.5",
        code=1,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert err == (
        "gitsess: gave up after waiting 0.5 s for a turn on main (the gated apply of process "
        f"{holder.pid} is ahead); nothing was applied\n"
    )
    assert out == ""
    assert _state(repo) == before
    assert changes_left(ctx, session) == ["patient.txt"]
    assert [t.split("-")[1] for t in _tickets(branch_queue.queue_dir(ctx, "main"))] == [
        str(holder.pid)
    ]
    _, err = cli("apply", "patient", "--patch", "--queue-timeout", "1", code=2)
    assert "--queue-timeout goes with --test" in err
    # NaN is no timeout either (it passed for one, and the apply waited forever)
    args = ("apply", "patient", "--commit", "--test", "true", "--queue-timeout", "nan")
    _, err = cli(*args, code=1)
    assert "--queue-timeout cannot be negative" in err
    assert _state(repo) == before
