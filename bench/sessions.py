"""gitsess sessions made through its CLI, and the session creation + first mount rows."""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.config import GITSESS, GITSESS_CLI, console
from bench.corpus import git
from bench.fmt import fmt_time
from bench.measure import Bench
from bench.views import View, ensure_stopped
from gitsess.git.repo import discover
from gitsess.runtime import mount

# ---------------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class Session:
    name: str
    id: str
    worktree: Path


def gitsess_cli(b: Bench, repo: Path, *args: str) -> str:
    done = subprocess.run(
        [GITSESS_CLI, *args], cwd=repo, env=b.env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"gitsess {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def cli_has(b: Bench, *commands: str) -> bool:
    return all(
        subprocess.run(
            [GITSESS_CLI, c, "--help"], env=b.env, capture_output=True, check=False
        ).returncode
        == 0
        for c in commands
    )


def gitsess_new(b: Bench, repo: Path, name: str, *extra: str) -> Session:
    data = json.loads(gitsess_cli(b, repo, "new", name, "--json", *extra))
    return Session(name, str(data["id"]), Path(str(data["worktree"])))


def session_dir_of(session: Session) -> Path:
    """The session's dir, which names its daemon (its state lives under the git dir)."""
    return discover(session.worktree).session_dir(session.id)


def session_spec(repo: Path, session: Session) -> mount.MountSpec:
    """Where gitsess keeps and mounts the session (its state lives under the git dir)."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    return mount.MountSpec(
        session_id=session.id,
        lower=session.worktree,
        session_dir=common / "gitsess" / "sessions" / session.id,
    )


@contextlib.contextmanager
def cli_mounted(b: Bench, repo: Path, session: Session) -> Iterator[View]:
    """`gitsess mount` ... `gitsess umount`, never leaving the daemon or the mount behind."""
    spec = session_spec(repo, session)
    pid: int | None = None
    try:
        gitsess_cli(b, repo, "mount", session.name)
        live = mount.status(session_dir_of(session))
        pid = live.daemon_pid if live is not None else None
        yield View(GITSESS, spec.target, pid)
    finally:
        try:
            subprocess.run(
                [GITSESS_CLI, "umount", session.name], cwd=repo, env=b.env, capture_output=True
            )
        finally:
            ensure_stopped(spec, pid)


@contextlib.contextmanager
def new_session(b: Bench, repo: Path, name: str, *extra: str) -> Iterator[Session]:
    """A session made with `gitsess new`, removed (worktree and branch too) afterwards."""
    try:
        yield gitsess_new(b, repo, name, *extra)
    finally:
        subprocess.run(
            [GITSESS_CLI, "rm", name, "--force"], cwd=repo, env=b.env, capture_output=True
        )


@dataclass
class Creation:
    files: int
    new: list[float] = field(default_factory=list)
    mount: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    new_mount: list[float] = field(default_factory=list)  # `gitsess new --mount`, one command
    worktree_add: list[float] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {
            "gitsess_new": statistics.median(self.new),
            "gitsess_mount": statistics.median(self.mount),
            "gitsess_total": statistics.median(self.total),
            "gitsess_new_mount": statistics.median(self.new_mount),
            "git_worktree_add": statistics.median(self.worktree_add),
        }


def time_session_start(b: Bench, repo: Path, name: str, c: Creation) -> None:
    """`gitsess new` then `gitsess mount`, until the view lists its root."""
    t0 = time.perf_counter()
    with new_session(b, repo, name) as session:
        t1 = time.perf_counter()
        with cli_mounted(b, repo, session) as view:
            next(view.root.iterdir(), None)
            t2 = time.perf_counter()
            b.memory.record(f"{c.files:,}-file repo: session start", view)
    c.new.append(t1 - t0)
    c.mount.append(t2 - t1)
    c.total.append(t2 - t0)


def time_new_mount(b: Bench, repo: Path, name: str, c: Creation) -> None:
    """`gitsess new --mount`, until the view lists its root."""
    t0 = time.perf_counter()
    with new_session(b, repo, name, "--mount") as session:
        live = mount.status(session_dir_of(session))
        try:
            if live is None:
                raise RuntimeError(f"gitsess new {name} --mount left nothing mounted")
            next(Path(live.mountpoint).iterdir(), None)
            c.new_mount.append(time.perf_counter() - t0)
        finally:
            subprocess.run(
                [GITSESS_CLI, "umount", session.name], cwd=repo, env=b.env, capture_output=True
            )
            ensure_stopped(session_spec(repo, session), live.daemon_pid if live else None)


def time_worktree_add(b: Bench, repo: Path, path: Path, branch: str) -> float:
    t0 = time.perf_counter()
    try:
        git(repo, "worktree", "add", "-q", "-b", branch, str(path), env=b.env)
        return time.perf_counter() - t0
    finally:
        git(repo, "worktree", "remove", "--force", str(path), env=b.env)
        git(repo, "branch", "-q", "-D", branch, env=b.env)


def run_creation(b: Bench, repos: Sequence[tuple[Path, int]]) -> list[Creation]:
    results = []
    for repo, files in repos:
        c = Creation(files)
        for i in range(b.cfg.creation_runs):
            time_session_start(b, repo, f"bench-{i}", c)
            time_new_mount(b, repo, f"bench-one-{i}", c)
            wt = b.scratch / f"wt-{repo.name}-{i}"
            c.worktree_add.append(time_worktree_add(b, repo, wt, f"bench-wt-{i}"))
        m = c.medians()
        console.log(
            f"start on {files:,} files: gitsess new {fmt_time(m['gitsess_new'])} + mount "
            f"{fmt_time(m['gitsess_mount'])}, new --mount {fmt_time(m['gitsess_new_mount'])}, "
            f"git worktree add {fmt_time(m['git_worktree_add'])}"
        )
        results.append(c)
    return results
