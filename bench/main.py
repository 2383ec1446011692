"""The command line: options, which rows run, and the run from corpus to report."""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import bench
import gitsess
from bench.apply import run_apply
from bench.checkpoints import run_checkpoints, run_governance
from bench.cli_start import run_cli_start
from bench.config import Config, console, out
from bench.corpus import _commit_all, _init_repo, build_corpus, build_wide_repo, isolated_env
from bench.fleet import (
    COMMITS_KEY,
    FIRST_STATUS,
    FIRST_STATUS_MOUNT,
    FLEET,
    commits,
    first_status,
    run_fleet,
    run_wide_memory,
)
from bench.git_session import git_ops, git_session_selected, run_git_session
from bench.measure import Bench, can_drop_caches, run_mutating, run_profiles, run_shared
from bench.profiles import profile_tables
from bench.radar import GATE, RADAR, run_gate, run_radar
from bench.report import Report, _gitsess_revision, machine, render
from bench.results import Result
from bench.sessions import Creation, cli_has, run_creation
from bench.wide import COLD_STATUS_WIDE, FIRST_STATUS_WIDE, WIDE, run_wide
from bench.workloads import Workload, workloads

# ---------------------------------------------------------------------------------- main


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=bench.__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a subset, under a minute")
    p.add_argument(
        "--runs",
        type=int,
        help="runs per figure (default 9; 5 for the slow workloads and diff / apply; --quick 3)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown tables")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY",
        help="only this workload (repeatable; also `session-start`, `apply`, `git-session`,"
        " `cli-start`, `fleet`, `first-status`, `commits`, `checkpoints`, `radar`, `gate`,"
        " `wide`)",
    )
    p.add_argument(
        "--profile", type=Path, metavar="DIR", help="cProfile the gitsess daemon (extra runs)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument(
        "--extra",
        action="store_true",
        help="also untar, cp -a, mv, chmod -R, sed -i of a lower directory, and python -m venv"
        " (a few minutes more)",
    )
    return p.parse_args(argv)


def select(cfg: Config, only: Sequence[str], cold_ok: bool) -> list[Workload]:
    chosen = [
        w
        for w in workloads()
        if (w.key in only if only else (w.quick or not cfg.quick) and (cfg.extra or not w.extra))
    ]
    return [w for w in chosen if cold_ok or not w.cold]


def preflight() -> None:
    missing = [tool for tool in ("fuse-overlayfs", "fusermount3", "git") if not shutil.which(tool)]
    if missing:
        raise SystemExit(f"bench: missing {', '.join(missing)}")
    if not Path("/dev/fuse").exists():
        raise SystemExit("bench: /dev/fuse is missing")


def cache_bytecode() -> None:
    """Measure gitsess as it runs once installed, with its modules' bytecode cached. With
    PYTHONDONTWRITEBYTECODE set (this machine sets it) every command and every daemon would
    compile the modules it imports from source: about 60 ms of `gitsess diff` alone."""
    compileall.compile_dir(Path(gitsess.__file__).parent, quiet=1)


def run_all(b: Bench, only: Sequence[str]) -> Report:
    load_at_start, revision = os.getloadavg()[0], _gitsess_revision()
    cold_ok = can_drop_caches()
    if not cold_ok:
        b.notes.append("cold workloads skipped: dropping the page cache needs root")
    chosen = select(b.cfg, only, cold_ok)
    results: list[Result] = []
    creation: list[Creation] = []
    if (
        chosen
        or not only
        or {"session-start", "apply", FLEET, FIRST_STATUS, COMMITS_KEY, RADAR, GATE} & set(only)
    ):
        console.log(f"building the corpus in {b.tmp}")
        corpus = build_corpus(b.tmp / "corpus", b.cfg, b.env)
        results += run_shared(b, [w for w in chosen if not w.mutates], corpus)
        results += run_mutating(b, [w for w in chosen if w.mutates], corpus)
    if b.profile_dir is not None and chosen:
        run_profiles(b, chosen, corpus)
    if not only or "session-start" in only:
        repos = [(corpus.repo, b.cfg.small_files)]
        if not b.cfg.quick:
            console.log(f"building the {b.cfg.wide_files:,}-file repository")
            wide = b.tmp / "wide"
            rels = build_wide_repo(wide, b.cfg.wide_files, b.env)
            run_wide_memory(b, wide, rels)
            repos.append((wide, b.cfg.wide_files))
        creation = run_creation(b, repos)
    if not b.cfg.quick and (not only or "apply" in only):
        if cli_has(b, "diff", "apply"):
            results += run_apply(b, corpus)
        else:
            b.notes.append("diff / apply --commit: not yet available (no such gitsess commands)")
    if "checkpoints" in only or (not only and not b.cfg.quick):
        run_checkpoints(b)
        run_governance(b)
    if (not b.cfg.quick and not only) or RADAR in only:
        if cli_has(b, "overlaps"):
            run_radar(b, corpus)
        else:
            b.notes.append(f"{RADAR}: not yet available (no `gitsess overlaps`)")
    if (not b.cfg.quick and not only) or GATE in only:
        run_gate(b, corpus)
    if git_session_selected(only) and (only or not b.cfg.quick):
        results += run_git_session(b, only, cold_ok)
    if FLEET in only or not (only or b.cfg.quick):
        results += run_fleet(b, corpus)
    else:
        if FIRST_STATUS in only:
            results += first_status(b, corpus)
        if COMMITS_KEY in only:
            results.append(commits(b, corpus))
    if WIDE in only or not (only or b.cfg.quick):
        results += run_wide(b, cold_ok)
    cli_start = None
    if not only or "cli-start" in only:
        cli_start = run_cli_start(b, corpus.repo if chosen else build_corpus_small(b))
    order = [w.key for w in workloads()] + ["diff", "apply-commit"] + [g.key for g in git_ops()]
    order += [FIRST_STATUS, FIRST_STATUS_MOUNT, COMMITS_KEY, FIRST_STATUS_WIDE, COLD_STATUS_WIDE]
    results.sort(key=lambda r: order.index(r.key))
    report = Report(machine(load_at_start, revision), b.cfg, results, creation, b.memory, b.notes)
    report.cli_start = cli_start
    return report


def build_corpus_small(b: Bench) -> Path:
    """A repository of two files: the small commands' start does not depend on its size."""
    repo = b.tmp / "cli-start"
    _init_repo(repo, b.env)
    (repo / "README.md").write_text("bench\n")
    _commit_all(repo, ["README.md"], b.env)
    return repo


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    preflight()
    cache_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="gitsess-bench-"))
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    b = Bench(
        Config.make(args.quick, args.runs, args.extra),
        tmp,
        isolated_env(tmp / "home"),
        args.profile,
    )
    started = time.perf_counter()
    try:
        report = run_all(b, args.only)
        report.seconds = time.perf_counter() - started
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    render(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(report.markdown())
    if args.profile is not None:
        for path in sorted(args.profile.glob("*.prof")):
            try:
                tables = profile_tables(path)
            except (OSError, EOFError, TypeError, ValueError) as e:
                console.log(f"cannot read {path}: {e}")
                continue
            for table in tables:
                out.print(table)
    return 0
