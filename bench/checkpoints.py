"""The `checkpoints` and `governance` rows: checkpoint and rewind costs, a session's disk under
stress."""

from __future__ import annotations

import functools
import json
import random
import statistics
import time
from pathlib import Path

from bench.apply import _change_files
from bench.config import MIB, console
from bench.corpus import _commit_all, _init_repo, _write_files, build_wide_repo, git
from bench.fmt import fmt_time
from bench.measure import Bench, timed
from bench.sessions import cli_mounted, gitsess_cli, new_session, session_dir_of, session_spec

# ---------------------------------------------------------------------------------- checkpoints


def _disk_bytes(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if not p.is_symlink())


def _checkpoint(session_dir: str) -> None:
    from gitsess.overlay import protocol

    protocol.checkpoint(session_dir, "manual", "", None, None)


def _rewind(session_dir: str, cp: int) -> None:
    from gitsess.overlay import protocol

    protocol.rewind(session_dir, cp, "rewind")


def run_checkpoints(b: Bench) -> None:
    """Checkpoints (overlay/history.py), gitsess alone (nothing to compare them with): the
    time of a checkpoint over a 50,000-file worktree with 1,000 paths changed since the last
    one, of a live rewind of 1,000 paths, and the storage 100 checkpoints of 20 files of 10 KB
    edited each turn take."""
    from gitsess.overlay import protocol

    wide = b.tmp / "cp-wide"
    console.log(f"checkpoints: building the {b.cfg.wide_files:,}-file repository")
    rels = build_wide_repo(wide, b.cfg.wide_files, b.env)
    changed = rels[:: max(1, len(rels) // 1000)][:1000]
    with new_session(b, wide, "cp") as s, cli_mounted(b, wide, s) as view:
        times = []
        sd = str(session_dir_of(s))
        for run in range(b.cfg.runs):
            _change_files(view.root, changed, f"cp{run}")
            protocol.sync(sd)
            times.append(timed(functools.partial(_checkpoint, sd)))
        cp = protocol.checkpoint(sd, "manual", "", None, None)
        assert cp is not None
        _change_files(view.root, changed, "rewind")
        protocol.sync(sd)
        rewind = timed(functools.partial(_rewind, sd, cp))
    b.notes.append(
        f"checkpoint, {len(rels):,}-file worktree, {len(changed):,} paths changed since the"
        f" last: median {fmt_time(statistics.median(times))} of {len(times)} (daemon op,"
        f" after a sync); live rewind of {len(changed):,} paths: {fmt_time(rewind)}"
    )
    small = b.tmp / "cp-turns"
    _init_repo(small, b.env)
    names = [f"f{i:02d}.txt" for i in range(20)]
    rng = random.Random(20)
    _write_files(small, names, 20 * 10_000, rng)
    _commit_all(small, names, b.env)
    turns, edited = 100, 0
    with new_session(b, small, "turns") as s:
        with cli_mounted(b, small, s) as view:
            for _ in range(turns):
                for name in names:
                    (view.root / name).write_bytes(rng.randbytes(10_000))
                    edited += 10_000
                protocol.checkpoint(str(session_dir_of(s)), "turn", "", None, None)
        # unmounted: its last commit and WAL checkpoint are done
        session_dir = session_spec(small, s).session_dir
        total = sum(
            _disk_bytes(session_dir / name)
            if (session_dir / name).is_dir()
            else (session_dir / name).stat().st_blocks * 512
            for name in ("delta.db", "delta.db-wal", "data", "checkpoints")
            if (session_dir / name).exists()
        )
    live = 20 * 10_000
    b.notes.append(
        f"storage after {turns} checkpoints of 20 files x 10 KB edited each turn:"
        f" {total / MIB:.1f} MiB on disk (delta.db, data, checkpoints) for a live view of"
        f" {live / 1000:.0f} KB and {edited / MIB:.1f} MiB of edits:"
        f" {total / (live + edited):.2f}x (goal < 2x)"
    )


STRESS_OPS = 100_000


def _stress(root: Path, ops: int, seed: int) -> None:
    """Many small writes, renames and unlinks over about 100 files (a view of ~220 KB), as
    an agent's build-and-test loop makes them: the audit log grows by one row per change."""
    rng = random.Random(seed)
    names = [f"s{i:03d}" for i in range(100)]
    for _ in range(ops):
        name = root / rng.choice(names)
        roll = rng.random()
        if roll < 0.7 or not name.exists():
            name.write_bytes(rng.randbytes(rng.randint(500, 4000)))
        elif roll < 0.85:
            name.rename(root / rng.choice(names))
        else:
            name.unlink()


def _session_disk(session_dir: Path) -> int:
    return sum(
        _disk_bytes(session_dir / name)
        if (session_dir / name).is_dir()
        else (session_dir / name).stat().st_blocks * 512
        for name in ("delta.db", "delta.db-wal", "data", "checkpoints")
        if (session_dir / name).exists()
    )


def run_governance(b: Bench) -> None:
    """Storage governance: a 100,000-op stress run in a mounted session, a checkpoint every
    1,000 ops, then `gitsess gc` (the retention, through the daemon) with the defaults and
    with `gitsess.log.maxEvents` 20,000: the session's disk bytes against what the live
    view, the kept checkpoints and the kept log need (`show`'s bytes by kind)."""
    from gitsess.overlay import protocol

    repo = b.tmp / "cp-stress"
    _init_repo(repo, b.env)
    names = [f"f{i:02d}.txt" for i in range(20)]
    _write_files(repo, names, 200_000, random.Random(3))
    _commit_all(repo, names, b.env)
    with new_session(b, repo, "stress") as s, cli_mounted(b, repo, s) as view:
        sd = session_dir_of(s)
        start = time.perf_counter()
        for turn in range(STRESS_OPS // 1000):
            _stress(view.root, 1000, turn)
            protocol.checkpoint(str(sd), "turn", "", None, None)
        took = time.perf_counter() - start
        protocol.sync(str(sd))
        steps = [("before gc", None), ("gc, defaults", None), ("gc, log.maxEvents 20000", "20000")]
        for label, max_events in steps:
            if max_events is not None:
                git(repo, "config", "gitsess.log.maxEvents", max_events, env=b.env)
            if label != "before gc":
                gitsess_cli(b, repo, "gc")
            protocol.sync(str(sd))
            kinds = json.loads(gitsess_cli(b, repo, "show", s.name, "--json"))["usage"][
                "bytes_by_kind"
            ]
            need = kinds["files_bytes"] + kinds["checkpoints_bytes"] + kinds["log_bytes"]
            disk = _session_disk(sd)
            b.notes.append(
                f"stress {STRESS_OPS:,} ops ({took:.0f} s, 100 checkpoints), {label}:"
                f" {disk / MIB:.1f} MiB on disk; needed {need / MIB:.1f} MiB (files"
                f" {kinds['files_bytes'] / MIB:.2f}, checkpoints"
                f" {kinds['checkpoints_bytes'] / MIB:.2f}, log {kinds['log_bytes'] / MIB:.2f},"
                f" free {kinds['free_bytes'] / MIB:.2f}): {disk / need:.2f}x (goal < 2x)"
            )
