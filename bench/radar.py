"""The `radar` (`gitsess overlaps`) and `gate` (`apply --commit --test`) rows."""

from __future__ import annotations

import contextlib
import functools
import resource
import statistics

from bench.apply import _change_files
from bench.config import GITSESS_CLI
from bench.corpus import Corpus
from bench.fmt import fmt_time
from bench.measure import Bench, timed
from bench.sessions import cli_mounted, new_session
from bench.workloads import _run

# ---------------------------------------------------------------------------- conflict radar

RADAR = "radar"
RADAR_SESSIONS, RADAR_PATHS = 20, 100


def run_radar(b: Bench, corpus: Corpus) -> None:
    """`gitsess overlaps --json` over 20 unmounted sessions of 100 changed files each, every
    session sharing half its files with the next (so 19 pairs are merged in memory); a
    gitsess-only figure (no other tool has one), with its goal of 1 s in the notes."""
    rels = [f for f in corpus.files if f.startswith("src/")]
    step = RADAR_PATHS // 2
    if len(rels) < step * (RADAR_SESSIONS + 1):
        b.notes.append(f"{RADAR}: skipped, the corpus has too few files")
        return
    times: list[float] = []
    with contextlib.ExitStack() as later:
        for n in range(RADAR_SESSIONS):
            session = later.enter_context(new_session(b, corpus.repo, f"bench-radar-{n}"))
            with cli_mounted(b, corpus.repo, session) as view:
                _change_files(view.root, rels[n * step : n * step + RADAR_PATHS], f"radar {n}")
        cpu: list[float] = []
        for _ in range(max(b.cfg.apply_runs, 3)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(
                timed(lambda: _run([GITSESS_CLI, "overlaps", "--json"], corpus.repo, b.env))
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    # CPU time too: on a loaded machine the wall time is mostly waiting for a core.
    b.notes.append(
        f"{RADAR}: `gitsess overlaps --json` of {RADAR_SESSIONS} sessions x {RADAR_PATHS} changed "
        f"files (19 overlapping pairs), median of {len(times)}: "
        f"{fmt_time(statistics.median(times))} wall, {fmt_time(statistics.median(cpu))} CPU "
        "(goal: under 1 s)"
    )


# ----------------------------------------------------------------------------- gated apply

GATE = "gate"
GATE_PATHS = 10


def run_gate(b: Bench, corpus: Corpus) -> None:
    """`gitsess apply --commit --test true` of a session of 10 changed files in the corpus,
    against the same apply without `--test` in the same run: the
    difference is what building the test's view of the result costs. A gitsess-only figure."""
    rels = [f for f in corpus.files if f.startswith("src/")][:GATE_PATHS]
    times: dict[str, list[float]] = {"gated": [], "plain": []}
    with contextlib.ExitStack() as later:
        for run in range(max(b.cfg.apply_runs, 3)):
            for kind in ("gated", "plain") if run % 2 else ("plain", "gated"):
                name = f"bench-gate-{kind}-{run}"
                session = later.enter_context(new_session(b, corpus.repo, name))
                with cli_mounted(b, corpus.repo, session) as view:
                    _change_files(view.root, rels, f"gate {kind} {run}")
                test = ["--test", "true"] if kind == "gated" else []
                apply = [GITSESS_CLI, "apply", name, "--commit", "-m", "bench", *test]
                times[kind].append(timed(functools.partial(_run, apply, corpus.repo, b.env)))
    gated, plain = statistics.median(times["gated"]), statistics.median(times["plain"])
    b.notes.append(
        f"{GATE}: `gitsess apply --commit --test true` of {GATE_PATHS} changed files in the "
        f"{len(corpus.files):,}-file corpus, median of {len(times['gated'])}: {fmt_time(gated)}; "
        f"without --test {fmt_time(plain)} (the gate's own cost: {fmt_time(gated - plain)})"
    )
