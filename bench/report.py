"""The report of a run: its tables, the machine it ran on, JSON and Markdown output."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import gitsess
from bench.cli_start import CLI_START_HEADER, CliStart, cli_start_rows
from bench.config import GITSESS, NATIVE, OVERLAYFS, TARGETS, Config, out
from bench.corpus import git
from bench.fmt import fmt_cpu, fmt_kib, fmt_ratio, fmt_time, markdown_table, rich_table
from bench.results import Memory, Result
from bench.sessions import Creation
from bench.workloads import Goal


def _goal_text(res: Result) -> str:
    met = res.goal_met()
    verdict = "" if met is None else (" met" if met else " MISSED")
    return ", ".join(_one_goal(res, g) for g in res.goals) + verdict


def _one_goal(res: Result, goal: Goal) -> str:
    k, n = res.runs_within(goal)
    if n == 0:
        return str(goal)
    return f"{goal} ({k}/{n} runs{'' if res.decided(goal) else ', a tie'})"


def result_rows(results: Sequence[Result]) -> list[list[str]]:
    return [
        [
            res.label,
            *[fmt_time(res.median(x)) for x in TARGETS],
            fmt_ratio(res.ratio(GITSESS, NATIVE)),
            fmt_ratio(res.ratio(GITSESS, OVERLAYFS)),
            _goal_text(res),
        ]
        for res in results
    ]


RESULT_HEADER = ["workload", *TARGETS, "gitsess / native", "gitsess / fuse-overlayfs", "goal"]


def cpu_rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for res in results:
        ovl, ours = res.cpu_median(OVERLAYFS), res.cpu_median(GITSESS)
        if ovl is None and ours is None:
            continue
        ratio = ours / ovl if ours is not None and ovl else None
        rows.append([res.label, fmt_cpu(ovl), fmt_cpu(ours), fmt_ratio(ratio)])
    return rows


CPU_HEADER = ["workload", OVERLAYFS, GITSESS, "gitsess / fuse-overlayfs"]


def creation_rows(items: Sequence[Creation]) -> list[list[str]]:
    return [[f"{c.files:,} files", *[fmt_time(v) for v in c.medians().values()]] for c in items]


CREATION_HEADER = [
    "repository",
    "gitsess new",
    "gitsess mount",
    "new + mount",
    "new --mount",
    "git worktree add",
]


def memory_rows(memory: Memory) -> list[list[str]]:
    return [
        [where, *[fmt_kib(peaks.get(x)) for x in (OVERLAYFS, GITSESS)]]
        for where, peaks in memory.peaks.items()
    ]


MEMORY_HEADER = ["daemon peak memory (VmHWM) after", OVERLAYFS, GITSESS]


def machine(load_at_start: float, revision: str) -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    df = subprocess.run(
        ["df", "--output=fstype", tempfile.gettempdir()], capture_output=True, text=True
    )
    ovl = subprocess.run(["fuse-overlayfs", "--version"], capture_output=True, text=True)
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "fs": (df.stdout.split() or ["unknown"])[-1],
        "python": platform.python_version(),
        "git": git(Path.cwd(), "--version").strip(),
        "gitsess": revision,
        "fuse-overlayfs": next(
            (
                ln.split("version", 1)[1].strip()
                for ln in ovl.stdout.splitlines()
                if ln.startswith("fuse-overlayfs")
            ),
            "unknown",
        ),
        "reclaim": _proactive_reclaim(),
        # Other work on the machine skews every figure: say how busy it was.
        "load": f"{load_at_start:.1f} at start, {os.getloadavg()[0]:.1f} at end (1-min average)",
    }


def _proactive_reclaim() -> str:
    """Whether DAMON pages out cold memory on this machine: then "warm" caches (page cache,
    dentries, inodes) partly go between the warm-up and the timed run, for every target."""
    schemes = Path("/sys/kernel/mm/damon/admin/kdamonds")
    actions = set()
    for state in schemes.glob("*/state"):
        with contextlib.suppress(OSError):
            if state.read_text().strip() == "on":
                for action in state.parent.glob("contexts/*/schemes/*/action"):
                    actions.add(action.read_text().strip())
    return f"DAMON {', '.join(sorted(actions))}" if actions else "none"


def _gitsess_revision() -> str:
    """The commit of the gitsess code measured (`-dirty` when it had uncommitted changes)."""
    source = Path(gitsess.__file__).resolve().parent.parent
    done = subprocess.run(
        ["git", "-C", str(source), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


@dataclass
class Report:
    machine: dict[str, str]
    config: Config
    results: list[Result]
    creation: list[Creation]
    memory: Memory
    notes: list[str]
    seconds: float = 0.0
    cli_start: CliStart | None = None

    def headline(self) -> str:
        m = self.machine
        return (
            f"gitsess benchmark ({'quick' if self.config.quick else 'full'}, medians of "
            f"{self.config.runs} runs ({self.config.slow_runs} for the slow workloads, "
            f"{self.config.apply_runs} for diff / apply, {self.config.creation_runs} for session "
            f"start), {self.seconds:.0f} s, gitsess {m['gitsess']}): "
            f"{m['cpu']}, {m['cores']} cores, "
            f"{m['memory']}, Linux {m['kernel']}, {m['fs']}, fuse-overlayfs {m['fuse-overlayfs']}; "
            f"proactive reclaim: {m['reclaim']}; load {m['load']}"
        )

    def tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        tables = []
        if self.results:
            tables.append(("Median wall time", RESULT_HEADER, result_rows(self.results)))
        cpu = cpu_rows(self.results)
        if cpu:
            tables.append(("FUSE daemon CPU time per run (median)", CPU_HEADER, cpu))
        if self.creation:
            tables.append(
                ("Session creation + first mount (median)", CREATION_HEADER,
                 creation_rows(self.creation))
            )  # fmt: skip
        if self.memory.peaks:
            tables.append(("FUSE daemon peak memory", MEMORY_HEADER, memory_rows(self.memory)))
        if self.cli_start is not None:
            tables.append(
                ("cli start (whole process, median)", CLI_START_HEADER,
                 cli_start_rows(self.cli_start))
            )  # fmt: skip
        return tables

    def markdown(self) -> str:
        parts = [self.headline() + "\n"]
        parts += [markdown_table(header, rows) for _, header, rows in self.tables()]
        parts += [f"- {note}\n" for note in self.notes]
        return "\n".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "config": asdict(self.config),
            "workloads": [
                {
                    "key": r.key,
                    "label": r.label,
                    "times": r.times,
                    "daemon_cpu": r.cpu,
                    "median": {t: r.median(t) for t in r.times},
                    "ratio_to_native": r.ratio(GITSESS, NATIVE),
                    "ratio_to_fuse_overlayfs": r.ratio(GITSESS, OVERLAYFS),
                    "goals": [str(g) for g in r.goals],
                    "goal_met": r.goal_met(),
                    "goal_runs_within": {str(g): r.runs_within(g) for g in r.goals},
                    "goal_decided": {str(g): r.decided(g) for g in r.goals},
                }
                for r in self.results
            ],
            "session_start": [
                {
                    "files": c.files,
                    "gitsess_new": c.new,
                    "gitsess_mount": c.mount,
                    "gitsess_total": c.total,
                    "gitsess_new_mount": c.new_mount,
                    "git_worktree_add": c.worktree_add,
                    "median": c.medians(),
                }
                for c in self.creation
            ],
            "peak_memory_kib": self.memory.peaks,
            "cli_start": None if self.cli_start is None else self.cli_start.times,
            "notes": self.notes,
            "seconds": self.seconds,
        }


def render(report: Report) -> None:
    out.print(report.headline())
    for title, header, rows in report.tables():
        out.print(rich_table(title, header, rows))
    for note in report.notes:
        out.print(f"note: {note}")
