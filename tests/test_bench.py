"""The bench package: its pure helpers, and (slow) that `--quick` runs end to end.

The benchmark's figures depend on the machine and its load: nothing here asserts a ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli_start import WARM_ROUNDS, settled
from bench.config import GITSESS, NATIVE, OVERLAYFS, TARGETS, Config
from bench.corpus import _layout
from bench.fmt import fmt_cpu, markdown_table
from bench.git_session import HISTORY_COMMITS, git_ops, git_session_selected
from bench.main import select
from bench.measure import rotation
from bench.report import _goal_text, cpu_rows
from bench.results import Result, sign_test
from bench.views import daemon_cpu_seconds
from bench.workloads import Goal

ROOT = Path(__file__).resolve().parent.parent


def test_rotation_puts_each_target_first_in_turn() -> None:
    firsts = [rotation(run)[0] for run in range(3)]
    assert sorted(firsts) == sorted(TARGETS)
    assert all(sorted(rotation(run)) == sorted(TARGETS) for run in range(3))


def test_goals_compare_gitsess_medians() -> None:
    res = Result("x", "x", [Goal(NATIVE, 2.0), Goal(OVERLAYFS, 1.0)])
    for target, times in ((NATIVE, [1.0, 1.2, 5.0]), (OVERLAYFS, [3.0, 3.0, 3.0])):
        for t in times:
            res.add(target, t)
    res.add(GITSESS, 2.0)
    assert res.ratio(GITSESS, NATIVE) == pytest.approx(2.0 / 1.2)
    assert res.goal_met() is True
    res.add(GITSESS, 4.0)  # median 3.0: 2.5x native
    assert res.goal_met() is False
    assert Result("y", "y").goal_met() is None


def test_goal_runs_are_paired_and_a_tie_is_named() -> None:
    ovl = Goal(OVERLAYFS, 1.0)
    res = Result("x", "x", [ovl])
    for g, o in ((1.0, 2.0), (3.0, 2.0), (1.0, 2.0), (3.0, 2.0), (2.0, 2.0)):
        res.add(GITSESS, g)
        res.add(OVERLAYFS, o)
    assert res.runs_within(ovl) == (3, 5)  # a run of equal times is within the goal
    assert not res.decided(ovl)
    assert _goal_text(res) == "<= 1x fuse-overlayfs (3/5 runs, a tie) met"
    ahead = Result("y", "y", [ovl])
    for _ in range(9):
        ahead.add(GITSESS, 1.0)
        ahead.add(OVERLAYFS, 2.0)
    assert ahead.decided(ovl)
    assert _goal_text(ahead) == "<= 1x fuse-overlayfs (9/9 runs) met"
    behind = Result("z", "z", [ovl])
    for _ in range(5):
        behind.add(GITSESS, 3.0)
        behind.add(OVERLAYFS, 2.0)
    assert behind.decided(ovl)  # 0 of 5: the fewest runs that can decide
    assert _goal_text(behind) == "<= 1x fuse-overlayfs (0/5 runs) MISSED"


def test_daemon_cpu_is_read_and_tabled_per_run() -> None:
    spent = daemon_cpu_seconds(os.getpid())
    assert spent is not None and spent > 0
    res = Result("x", "x")
    res.add(NATIVE, 1.0)  # no daemon: no CPU figure
    for ovl, ours in ((0.2, 0.1), (0.4, 0.3), (0.3, 0.2)):
        res.add(OVERLAYFS, 1.0, ovl)
        res.add(GITSESS, 1.0, ours)
    assert res.cpu_median(NATIVE) is None
    assert cpu_rows([res]) == [["x", "300 ms", "200 ms", "0.67x"]]
    assert cpu_rows([Result("y", "y")]) == []
    assert [fmt_cpu(x) for x in (0.0, 0.35 - 0.34, 1.5)] == ["0 ms", "10 ms", "1.50 s"]


def test_sign_test_matches_the_binomial_tails() -> None:
    assert sign_test(0, 9) == pytest.approx(2 / 512)
    assert sign_test(9, 9) == pytest.approx(2 / 512)
    assert sign_test(1, 9) == pytest.approx(20 / 512)
    assert sign_test(2, 9) == pytest.approx(92 / 512)
    assert sign_test(4, 9) == 1.0
    assert sign_test(5, 10) == 1.0


def test_quick_selection_and_cold_skipping() -> None:
    quick = Config.make(True, None)
    full = Config.make(False, None)
    assert {w.key for w in select(quick, [], True)} < {w.key for w in select(full, [], True)}
    assert not any(w.cold for w in select(full, [], False))
    assert [w.key for w in select(quick, ["rm-rf"], True)] == ["rm-rf"]
    extra = {w.key for w in select(Config.make(False, None, True), [], True)}
    assert extra - {w.key for w in select(full, [], True)} == {
        "untar",
        "cp-a",
        "mv-dir",
        "chmod-r",
        "sed-i",
        "venv",
    }
    assert [w.key for w in select(full, ["mv-dir"], True)] == ["mv-dir"]


def test_markdown_table_shape() -> None:
    text = markdown_table(["a", "b"], [["x", "1 ms"]])
    assert text.splitlines() == ["| a | b |", "| --- | ---: |", "| x | 1 ms |"]


def test_layout_has_the_bulk_directory() -> None:
    rels = _layout(5000, 400, 2000)
    assert len(rels) == len(set(rels)) == 5000
    assert sum(r.startswith("vendor/") for r in rels) == 2000
    dirs = {str(Path(r).parent) for r in rels}
    assert 300 <= len(dirs) <= 400


@pytest.mark.slow
@pytest.mark.fuse
@pytest.mark.timeout(600)
def test_quick_run_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--runs", "1", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=580,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    keys = {w["key"] for w in data["workloads"]}
    assert {"find-warm", "read-small-warm", "seq-write", "git-status-warm"} <= keys
    for w in data["workloads"]:
        assert set(w["median"]) == {"native", "fuse-overlayfs", "gitsess"}, w
        assert all(t > 0 for t in w["median"].values())
        assert set(w["daemon_cpu"]) == {"fuse-overlayfs", "gitsess"}, w
    assert data["session_start"][0]["files"] == 5000
    assert data["peak_memory_kib"]
    cli_start = data["cli_start"]
    assert {"gitsess ls", "gitsess --version", "git status", "python -c pass"} <= set(cli_start)
    assert all(len(times) == 3 and min(times) > 0 for times in cli_start.values())
    # Nothing is left mounted.
    assert "gitsess-bench-" not in Path("/proc/self/mounts").read_text()


def test_the_cli_start_row_warms_until_its_rotations_settle() -> None:
    """At least two rotations (the first reads everything back after the cold rows); one that
    took much longer than the one before keeps it warming, up to the last."""
    assert not settled([]) and not settled([0.5])
    assert settled([0.5, 0.3]) and settled([0.3, 0.32])
    assert not settled([0.2, 0.5]) and not settled([0.5, 0.3, 0.6])
    growing = [0.1 * 2**n for n in range(WARM_ROUNDS[1])]
    assert not settled(growing[:-1]) and settled(growing)


def test_git_session_rows_are_selected_by_group_or_key() -> None:
    keys = [op.key for op in git_ops()]
    assert git_session_selected([]) and git_session_selected(["git-session"])
    assert git_session_selected([keys[0]])
    assert not git_session_selected(["find-warm"])
    assert HISTORY_COMMITS >= 100  # git log -100


def test_git_timer_times_a_command_after_its_untimed_steps(tmp_path: Path) -> None:
    timer = subprocess.Popen(
        [sys.executable, "-m", "bench.git_timer"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert timer.stdin is not None and timer.stdout is not None
    try:
        assert json.loads(timer.stdout.readline()) == {"ready": True}
        (tmp_path / "f").write_text("a\n")
        req = {"edit": ["f"], "line": "b\n", "prep": [["sleep", "1"]], "cmd": ["true"]}
        timer.stdin.write(json.dumps(req) + "\n")
        timer.stdin.flush()
        seconds = json.loads(timer.stdout.readline())["seconds"]
        assert 0 < seconds < 1  # the prep step is not timed
        assert (tmp_path / "f").read_text() == "a\nb\n"
    finally:
        timer.stdin.close()
        assert timer.wait(timeout=30) == 0
