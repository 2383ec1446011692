"""The figures of one row (`Result`: times per target, goals, sign test) and the daemons' peak
memory (`Memory`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from bench.config import GITSESS
from bench.views import View
from bench.workloads import Goal

# ---------------------------------------------------------------------------------- results


@dataclass
class Result:
    key: str
    label: str
    goals: list[Goal] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # the daemons', per run

    def add(self, target: str, seconds: float, cpu: float | None = None) -> None:
        self.times.setdefault(target, []).append(seconds)
        if cpu is not None:
            self.cpu.setdefault(target, []).append(cpu)

    def cpu_median(self, target: str) -> float | None:
        return _median(self.cpu.get(target))

    def median(self, target: str) -> float | None:
        return _median(self.times.get(target))

    def ratio(self, target: str, against: str) -> float | None:
        a, b = self.median(target), self.median(against)
        return a / b if a is not None and b else None

    def goal_met(self) -> bool | None:
        ratios = [(self.ratio(GITSESS, g.against), g.factor) for g in self.goals]
        if not ratios or any(r is None for r, _ in ratios):
            return None
        return all(r is not None and r <= factor for r, factor in ratios)

    def runs_within(self, goal: Goal) -> tuple[int, int]:
        """In how many runs gitsess was within the goal of the target measured right beside it
        (the same run of the rotation), and of how many runs."""
        pairs = list(
            zip(self.times.get(GITSESS, []), self.times.get(goal.against, []), strict=True)
        )
        return sum(g <= goal.factor * a for g, a in pairs), len(pairs)

    def decided(self, goal: Goal) -> bool:
        """Whether the runs tell the two sides of the goal apart (a sign test, 5 % for each
        side, so that 5 of 5 runs decide): a row where gitsess is within the goal in about half
        the runs is a tie, and its median falls either side of the goal from run to run."""
        k, n = self.runs_within(goal)
        return n > 0 and sign_test(k, n) < 0.1


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def sign_test(k: int, n: int) -> float:
    """The two-sided p-value of `k` successes in `n` runs, if each run were a coin toss."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


@dataclass
class Memory:
    """Peak resident memory (VmHWM, KiB) of the FUSE daemons, by what they went through."""

    peaks: dict[str, dict[str, int]] = field(default_factory=dict)

    def record(self, where: str, view: View) -> None:
        kib = view.peak_kib()
        if kib is not None:
            slot = self.peaks.setdefault(where, {})
            slot[view.target] = max(kib, slot.get(view.target, 0))
