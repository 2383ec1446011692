"""scripts/bench.py: its pure helpers, and (slow) that `--quick` runs end to end.

The benchmark's figures depend on the machine and its load: nothing here asserts a ratio.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gitsess_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_rotation_puts_each_target_first_in_turn() -> None:
    firsts = [bench.rotation(run)[0] for run in range(3)]
    assert sorted(firsts) == sorted(bench.TARGETS)
    assert all(sorted(bench.rotation(run)) == sorted(bench.TARGETS) for run in range(3))


def test_goals_compare_gitsess_medians() -> None:
    res = bench.Result("x", "x", [bench.Goal(bench.NATIVE, 2.0), bench.Goal(bench.OVERLAYFS, 1.0)])
    for target, times in ((bench.NATIVE, [1.0, 1.2, 5.0]), (bench.OVERLAYFS, [3.0, 3.0, 3.0])):
        for t in times:
            res.add(target, t)
    res.add(bench.GITSESS, 2.0)
    assert res.ratio(bench.GITSESS, bench.NATIVE) == pytest.approx(2.0 / 1.2)
    assert res.goal_met() is True
    res.add(bench.GITSESS, 4.0)  # median 3.0: 2.5x native
    assert res.goal_met() is False
    assert bench.Result("y", "y").goal_met() is None


def test_goal_runs_are_paired_and_a_tie_is_named() -> None:
    ovl = bench.Goal(bench.OVERLAYFS, 1.0)
    res = bench.Result("x", "x", [ovl])
    for g, o in ((1.0, 2.0), (3.0, 2.0), (1.0, 2.0), (3.0, 2.0), (2.0, 2.0)):
        res.add(bench.GITSESS, g)
        res.add(bench.OVERLAYFS, o)
    assert res.runs_within(ovl) == (3, 5)  # a run of equal times is within the goal
    assert not res.decided(ovl)
    assert bench._goal_text(res) == "<= 1x fuse-overlayfs (3/5 runs, a tie) met"
    ahead = bench.Result("y", "y", [ovl])
    for _ in range(9):
        ahead.add(bench.GITSESS, 1.0)
        ahead.add(bench.OVERLAYFS, 2.0)
    assert ahead.decided(ovl)
    assert bench._goal_text(ahead) == "<= 1x fuse-overlayfs (9/9 runs) met"
    behind = bench.Result("z", "z", [ovl])
    for _ in range(5):
        behind.add(bench.GITSESS, 3.0)
        behind.add(bench.OVERLAYFS, 2.0)
    assert behind.decided(ovl)  # 0 of 5: the fewest runs that can decide
    assert bench._goal_text(behind) == "<= 1x fuse-overlayfs (0/5 runs) MISSED"


def test_daemon_cpu_is_read_and_tabled_per_run() -> None:
    spent = bench.daemon_cpu_seconds(os.getpid())
    assert spent is not None and spent > 0
    res = bench.Result("x", "x")
    res.add(bench.NATIVE, 1.0)  # no daemon: no CPU figure
    for ovl, ours in ((0.2, 0.1), (0.4, 0.3), (0.3, 0.2)):
        res.add(bench.OVERLAYFS, 1.0, ovl)
        res.add(bench.GITSESS, 1.0, ours)
    assert res.cpu_median(bench.NATIVE) is None
    assert bench.cpu_rows([res]) == [["x", "300 ms", "200 ms", "0.67x"]]
    assert bench.cpu_rows([bench.Result("y", "y")]) == []
    assert [bench.fmt_cpu(x) for x in (0.0, 0.35 - 0.34, 1.5)] == ["0 ms", "10 ms", "1.50 s"]


def test_sign_test_matches_the_binomial_tails() -> None:
    assert bench.sign_test(0, 9) == pytest.approx(2 / 512)
    assert bench.sign_test(9, 9) == pytest.approx(2 / 512)
    assert bench.sign_test(1, 9) == pytest.approx(20 / 512)
    assert bench.sign_test(2, 9) == pytest.approx(92 / 512)
    assert bench.sign_test(4, 9) == 1.0
    assert bench.sign_test(5, 10) == 1.0


def test_quick_selection_and_cold_skipping() -> None:
    quick = bench.Config.make(True, None)
    full = bench.Config.make(False, None)
    assert {w.key for w in bench.select(quick, [], True)} < {
        w.key for w in bench.select(full, [], True)
    }
    assert not any(w.cold for w in bench.select(full, [], False))
    assert [w.key for w in bench.select(quick, ["rm-rf"], True)] == ["rm-rf"]
    extra = {w.key for w in bench.select(bench.Config.make(False, None, True), [], True)}
    assert extra - {w.key for w in bench.select(full, [], True)} == {
        "untar",
        "cp-a",
        "mv-dir",
        "chmod-r",
        "sed-i",
        "venv",
    }
    assert [w.key for w in bench.select(full, ["mv-dir"], True)] == ["mv-dir"]


def test_markdown_table_shape() -> None:
    text = bench.markdown_table(["a", "b"], [["x", "1 ms"]])
    assert text.splitlines() == ["| a | b |", "| --- | ---: |", "| x | 1 ms |"]


def test_layout_has_the_bulk_directory() -> None:
    rels = bench._layout(5000, 400, 2000)
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
        [sys.executable, str(SCRIPT), "--quick", "--runs", "1", "--json", str(out)],
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


def test_git_session_rows_are_selected_by_group_or_key() -> None:
    keys = [op.key for op in bench.git_ops()]
    assert bench.git_session_selected([]) and bench.git_session_selected(["git-session"])
    assert bench.git_session_selected([keys[0]])
    assert not bench.git_session_selected(["find-warm"])
    assert bench.HISTORY_COMMITS >= 100  # git log -100
