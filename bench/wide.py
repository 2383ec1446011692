"""The first and the cold `git status` on the 50,000-file repository (`--only wide`): issue 41
asks for the fleet's rows on a repository ten times the corpus, where a cost per file the
5,000-file corpus hides shows tenfold."""

from __future__ import annotations

import functools
from pathlib import Path

from bench.config import NATIVE, OVERLAYFS, console
from bench.corpus import build_wide_repo
from bench.fleet import first_status_in_place
from bench.measure import Bench, drop_caches, progress, rotation, timed
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
    the corpus's "git status (cold)" row), with the daemons' CPU time."""
    res = Result(
        COLD_STATUS_WIDE,
        f"git status (cold), {b.cfg.wide_files:,} files",
        [Goal(NATIVE, 1.5), Goal(OVERLAYFS, 1.0)],
    )
    for run in range(b.cfg.slow_runs):
        for target in rotation(run):
            with b.view(target, repo) as view:
                status = functools.partial(_run, STATUS, view.root, b.env)
                status()  # the view's own first status: its index refreshed once
                drop_caches()
                before = view.cpu_seconds()
                seconds = timed(status)
                after = view.cpu_seconds()
                cpu = after - before if after is not None and before is not None else None
                res.add(target, seconds, cpu if target != NATIVE else None)
    progress(res)
    return res
