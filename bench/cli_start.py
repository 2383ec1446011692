"""The `cli-start` row: how long small gitsess commands take to start, against git and Python."""

from __future__ import annotations

import functools
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.config import GITSESS_CLI, console
from bench.fmt import _colour, fmt_ratio, fmt_time
from bench.measure import Bench, timed
from bench.sessions import gitsess_cli
from bench.workloads import _run

# ---------------------------------------------------------------------- cli start

CLI_START_GOAL = 0.080  # seconds, whole process, median (issue 40)
# Untimed rotations before the timed ones, until one takes no longer than the one before (within
# WARM_SETTLED): after the cold rows dropped the caches, one rotation left `python -c pass` at
# 17 ms against 11 (the interpreter, its libraries and the bytecode read back, the machine
# busy with what the cold rows left).
WARM_ROUNDS = (2, 8)  # at least, at most
WARM_SETTLED = 1.1
CLI_COMMANDS = (("ls",), ("show", "bench-cli"), ("kv", "bench-cli", "get", "k"), ("--version",))


@dataclass
class CliStart:
    """Whole-process wall times of the small commands, beside `git status` and `python -c
    pass` measured in the same rotation."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def add(self, label: str, seconds: float) -> None:
        self.times.setdefault(label, []).append(seconds)

    def median(self, label: str) -> float:
        return statistics.median(self.times[label])


def run_cli_start(b: Bench, repo: Path) -> CliStart:
    gitsess_cli(b, repo, "new", "bench-cli")
    gitsess_cli(b, repo, "kv", "bench-cli", "set", "k", "v")
    commands = {f"gitsess {' '.join(c)}": [GITSESS_CLI, *c] for c in CLI_COMMANDS}
    commands["git status"] = ["git", "status"]
    commands["python -c pass"] = [sys.executable, "-c", "pass"]
    # As installed: with the bytecode cached (PYTHONDONTWRITEBYTECODE would have each run
    # compile every module again, doubling what is measured), written by the warm-up.
    env = {k: v for k, v in b.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = CliStart()
    labels = list(commands)
    try:
        rounds = warm(commands, repo, env)
        # Short commands swing most with the machine's load: twice the runs of a workload.
        for run in range(b.cfg.runs * 2 + 1):
            k = run % len(labels)
            for label in [*labels[k:], *labels[:k]]:
                result.add(label, timed(functools.partial(_run, commands[label], repo, env)))
    finally:
        gitsess_cli(b, repo, "rm", "bench-cli", "--force")
    console.log(
        f"cli start (after {rounds} warm-up rotations): "
        + ", ".join(f"{label} {fmt_time(result.median(label))}" for label in labels)
    )
    return result


def warm(commands: dict[str, list[str]], repo: Path, env: dict[str, str]) -> int:
    """Rotations of every command, untimed in the row, until they settle; how many ran."""
    took: list[float] = []
    while not settled(took):
        took.append(sum(timed(functools.partial(_run, c, repo, env)) for c in commands.values()))
    return len(took)


def settled(took: list[float]) -> bool:
    """Whether rotations that took `took` warmed enough (see WARM_ROUNDS)."""
    if len(took) < WARM_ROUNDS[0]:
        return False
    return len(took) >= WARM_ROUNDS[1] or took[-1] <= took[-2] * WARM_SETTLED


def cli_start_rows(c: CliStart) -> list[list[str]]:
    git_status, python = c.median("git status"), c.median("python -c pass")
    return [
        [
            label,
            fmt_time(c.median(label)),
            fmt_time(git_status),
            fmt_time(python),
            fmt_ratio(c.median(label) / git_status),
            _colour("yes" if c.median(label) < CLI_START_GOAL else "no"),
        ]
        for label in c.times
        if label.startswith("gitsess")
    ]


CLI_START_HEADER = [
    "command", "gitsess", "git status", "python -c pass", "/ git status", "< 80 ms"
]  # fmt: skip
