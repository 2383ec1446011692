"""Running workloads on the three views in rotation (`Bench`), cold runs, and the profiled run."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.config import GITSESS, NATIVE, OVERLAYFS, TARGETS, Config, Step, console
from bench.corpus import Corpus
from bench.fmt import fmt_time
from bench.results import Memory, Result
from bench.views import View, gitsess_view, native_view, overlayfs_view
from bench.workloads import Env, Workload

# ---------------------------------------------------------------------------------- measuring


@dataclass
class Bench:
    """Everything one benchmark run shares."""

    cfg: Config
    tmp: Path
    env: dict[str, str]  # for git and gitsess subprocesses
    profile_dir: Path | None = None
    memory: Memory = field(default_factory=Memory)
    notes: list[str] = field(default_factory=list)

    @property
    def scratch(self) -> Path:
        path = self.tmp / "scratch"
        path.mkdir(exist_ok=True)
        return path

    def view(
        self, target: str, lower: Path, profile: str | None = None
    ) -> contextlib.AbstractContextManager[View]:
        if target == NATIVE:
            return native_view(lower)
        if target == OVERLAYFS:
            return overlayfs_view(lower, self.scratch)
        stats = None if profile is None or self.profile_dir is None else self.stats_path(profile)
        return gitsess_view(lower, self.scratch, stats)

    def stats_path(self, key: str) -> Path:
        assert self.profile_dir is not None
        return self.profile_dir / f"{key}.prof"


def can_drop_caches() -> bool:
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    # The kernel now sends FORGETs to every FUSE daemon; let them drain before timing.
    time.sleep(0.3)


def timed(step: Step) -> float:
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def measure_once(w: Workload, env: Env) -> tuple[float, float | None]:
    """The wall time of one run of `w`, and the CPU time its daemon spent meanwhile."""
    prepared = w.prepare(env)
    try:
        return measure_step(env.view, prepared.action, cold=w.cold)
    finally:
        prepared.cleanup()


def measure_step(view: View, action: Step, *, cold: bool) -> tuple[float, float | None]:
    """The wall time of `action` in `view`, and the CPU time its daemon spent meanwhile (None
    where no daemon serves it); the kernel's caches dropped first when `cold`."""
    if cold:
        drop_caches()
    before = view.cpu_seconds()
    seconds = timed(action)
    after = view.cpu_seconds()
    cpu = after - before if after is not None and before is not None else None
    return seconds, cpu


def rotation(run: int) -> list[str]:
    """The order of the targets in run `run`: each goes first in turn, so drift spreads out."""
    k = run % len(TARGETS)
    return [*TARGETS[k:], *TARGETS[:k]]


def run_shared(b: Bench, items: Sequence[Workload], corpus: Corpus) -> list[Result]:
    """Workloads that leave the tree as they found it: one view per target for all runs."""
    results: list[Result] = []
    if not items:
        return results
    with contextlib.ExitStack() as stack:
        views = {t: stack.enter_context(b.view(t, corpus.repo)) for t in TARGETS}
        for w in items:
            res = Result(w.key, w.label, list(w.goals))
            envs = {t: Env(views[t], corpus, b.cfg) for t in TARGETS}
            if not w.cold:
                for t in TARGETS:
                    measure_once(w, envs[t])  # warm-up, not counted
            for run in range(b.cfg.runs):
                for t in rotation(run):
                    res.add(t, *measure_once(w, envs[t]))
            progress(res)
            results.append(res)
        for view in views.values():
            b.memory.record("5,000-file corpus: read workloads", view)
    return results


def run_mutating(b: Bench, items: Sequence[Workload], corpus: Corpus) -> list[Result]:
    """Workloads that change the tree: a fresh view for every run, one view at a time."""
    results = []
    for w in items:
        res = Result(w.key, w.label, list(w.goals))
        for run in range(b.cfg.slow_runs if w.slow else b.cfg.runs):
            for t in rotation(run):
                with b.view(t, corpus.repo) as view:
                    res.add(t, *measure_once(w, Env(view, corpus, b.cfg)))
                    b.memory.record("5,000-file corpus: write workloads", view)
        progress(res)
        results.append(res)
    return results


def run_profiles(b: Bench, items: Sequence[Workload], corpus: Corpus) -> None:
    """One extra, uncounted run of each workload on a gitsess daemon under cProfile."""
    for w in items:
        with b.view(GITSESS, corpus.repo, profile=w.key) as view:
            env = Env(view, corpus, b.cfg)
            if not w.cold and not w.mutates:
                measure_once(w, env)  # the warm-up is profiled too
            took, _ = measure_once(w, env)
        console.log(f"profiled {w.label}: {fmt_time(took)} under cProfile")


def progress(res: Result) -> None:
    parts = [f"{t} {fmt_time(res.median(t))}" for t in TARGETS if res.median(t) is not None]
    console.log(f"{res.label}: " + ", ".join(parts))
