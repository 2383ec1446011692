"""The first and the cold `git status` on the 50,000-file repository (`--only wide`): issue 41
asks for the fleet's rows on a repository ten times the corpus, where a cost per file the
5,000-file corpus hides shows tenfold."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from bench.config import NATIVE, OVERLAYFS, TARGETS, console
from bench.corpus import build_wide_repo
from bench.fleet import first_status_in_place
from bench.measure import Bench, measure_step, progress, rotation
from bench.results import Result
from bench.workloads import Goal, _run

WIDE = "wide"  # --only: the rows below
FIRST_STATUS_WIDE = "first-status-wide"
COLD_STATUS_WIDE = "git-status-cold-wide"
STATUS = ["git", "status", "--porcelain"]


def run_wide(b: Bench, cold_ok: bool) -> list[Result]:
    console.log(f"building the {b.cfg.wide_files:,}-file repository")
    repo = b.tmp / "wide-status"
    build_wide_repo(repo, b.cfg.wide_files, b.env)
    label = f"first git status in a new session, in place, {b.cfg.wide_files:,} files (warm)"
    in_place = Result(FIRST_STATUS_WIDE, label, [Goal(NATIVE, 2.0)])
    results = [first_status_in_place(b, repo, in_place, b.cfg.slow_runs)]
    if cold_ok:
        results.append(_cold_status(b, repo))
    return results


def _cold_status(b: Bench, repo: Path) -> Result:
    """`git status` with the kernel's caches dropped, in a view mounted once per target (as
    the corpus's "git status (cold)" row, `measure.run_shared`), with the daemons' CPU time."""
    res = Result(
        COLD_STATUS_WIDE,
        f"git status (cold), {b.cfg.wide_files:,} files",
        [Goal(NATIVE, 1.5), Goal(OVERLAYFS, 1.0)],
    )
    with contextlib.ExitStack() as stack:
        views = {t: stack.enter_context(b.view(t, repo)) for t in TARGETS}
        statuses = {t: functools.partial(_run, STATUS, views[t].root, b.env) for t in TARGETS}
        for status in statuses.values():
            status()  # each view's own first status: its index refreshed once, not counted
        for run in range(b.cfg.slow_runs):
            for t in rotation(run):
                res.add(t, *measure_step(views[t], statuses[t], cold=True))
    progress(res)
    return res
