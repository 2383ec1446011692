"""Git inside a session (`git-session` rows): git commands timed by `bench.git_timer`, natively
and inside `gitsess run`."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.config import GITSESS, GITSESS_CLI, MIB, NATIVE, Config, console
from bench.corpus import _commit_all, _init_repo, _layout, _write_files, git
from bench.measure import Bench, drop_caches, progress
from bench.results import Result
from bench.sessions import Session, gitsess_new, session_dir_of
from bench.views import daemon_cpu_seconds
from bench.workloads import Goal, _run
from gitsess.runtime import mount

# ---------------------------------------------------------------------- git in a session

# where `python -m bench.git_timer` finds this package, whatever the directory it runs in
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
GIT_SESSION = "git-session"  # --only: every row below
GIT_TARGETS = (NATIVE, GITSESS)
HISTORY_COMMITS = 150  # `git log -100` needs 100
DIFF_FILES = 5


@dataclass(frozen=True)
class GitOp:
    key: str
    label: str
    cmd: tuple[str, ...]
    cold: bool = False
    goals: tuple[Goal, ...] = ()


def git_ops() -> list[GitOp]:
    return [
        GitOp("git-session-status-warm", "git status in a session (warm)", ("git", "status"),
              goals=(Goal(NATIVE, 1.3),)),
        GitOp("git-session-status-cold", "git status in a session (cold)", ("git", "status"),
              cold=True),
        GitOp("git-session-commit", "git commit of 1 file in a session",
              ("git", "commit", "-q", "-m", "bench")),
        # every file changed, then `git add -A && git commit`: 5,000 new loose objects and
        # the trees, written into the session's delta (issue 36: objects copy-on-write)
        GitOp("git-session-commit-all", "commit 5,000 files inside a session",
              ("sh", "-c", "git add -A && git commit -q -m bench"), goals=(Goal(NATIVE, 1.5),)),
        GitOp("git-session-log", "git log -100 in a session", ("git", "log", "-100")),
        GitOp("git-session-diff", f"git diff of {DIFF_FILES} files in a session", ("git", "diff")),
    ]  # fmt: skip


def git_session_selected(only: Sequence[str]) -> bool:
    return not only or GIT_SESSION in only or any(op.key in only for op in git_ops())


def build_history_repo(repo: Path, cfg: Config, env: dict[str, str]) -> list[str]:
    """The corpus's files (no big file) committed as one pack, then `HISTORY_COMMITS` commits
    each appending a line to one file (`git fast-import`), the files on disk at the tip."""
    rng = random.Random(28)
    _init_repo(repo, env)
    rels = _layout(cfg.small_files, cfg.dirs, cfg.bulk_files)
    _write_files(repo, rels, cfg.corpus_mib * MIB, rng)
    _commit_all(repo, rels, env)
    stream = bytearray()
    for k in range(HISTORY_COMMITS):
        rel = rels[(k * 37) % len(rels)]
        path = repo / rel
        with open(path, "ab") as f:
            f.write(f"# history {k}\n".encode())
        data = path.read_bytes()
        stream += b"commit refs/heads/main\n"
        stream += b"committer Bench <bench@example.com> %d +0000\n" % (1700000000 + 60 * (k + 1))
        stream += b"data 9\nhistory\n\n"
        if k == 0:
            stream += b"from refs/heads/main^0\n"
        stream += b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(data), data)
    subprocess.run(
        ["git", "fast-import", "--quiet", "--force"], cwd=repo, env=env, input=bytes(stream),
        check=True,
    )  # fmt: skip
    git(repo, "reset", "-q", env=env)
    git(repo, "update-index", "-q", "--refresh", env=env)
    return rels


class GitTimer:
    """A running `bench.git_timer`: natively in the repository, or inside `gitsess run` over it."""

    def __init__(
        self,
        b: Bench,
        target: str,
        repo: Path,
        session: str | None,
        env: dict[str, str] | None = None,
    ) -> None:
        cmd = [sys.executable, "-m", "bench.git_timer"]
        if target == GITSESS:
            cmd = [GITSESS_CLI, "run", "-s", str(session), "--", *cmd]
        self.proc = subprocess.Popen(
            cmd,
            cwd=repo,
            env={**b.env, **(env or {}), "PYTHONPATH": str(PACKAGE_ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.read()

    def read(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the git timer ended: {self.proc.wait()}")
        answer: dict[str, object] = json.loads(line)
        return answer

    def ask(self, **req: object) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return float(str(self.read()["seconds"]))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.proc.wait(timeout=30) != 0:
            raise RuntimeError(f"the git timer exited {self.proc.returncode}")


def _wait_unmounted(session_dir: Path, timeout: float = 30) -> None:
    """Until the session's daemon is gone, so that the next `gitsess run` starts a fresh one."""
    deadline = time.monotonic() + timeout
    while mount.status(session_dir) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon of session {session_dir.name} did not stop")
        time.sleep(0.05)


def _git_op_once(
    timer: GitTimer, op: GitOp, tag: str, rels: Sequence[str], pid: int | None
) -> tuple[float, float | None]:
    """One timed run of `op` (its untimed preparation first), and the daemon's CPU time."""
    if op.key == "git-session-commit":
        rel = rels[-1]
        timer.ask(
            edit=[rel], line=f"# committed by the benchmark: {tag}\n", prep=[["git", "add", rel]]
        )
    elif op.key == "git-session-commit-all":
        timer.ask(edit=list(rels), line=f"# all committed by the benchmark: {tag}\n")
    before = daemon_cpu_seconds(pid) if pid is not None else None
    seconds = timer.ask(cmd=list(op.cmd))
    after = daemon_cpu_seconds(pid) if pid is not None else None
    return seconds, (after - before if after is not None and before is not None else None)


def run_git_session(b: Bench, only: Sequence[str], cold_ok: bool) -> list[Result]:
    """git inside one long-lived `gitsess run` (in place) against the same git natively, on two
    copies of one repository of 5,000 files and 151 commits (each target changes its own)."""
    ops = [
        op for op in git_ops()
        if (not only or GIT_SESSION in only or op.key in only) and (cold_ok or not op.cold)
    ]  # fmt: skip
    console.log("building the repository with history")
    repos = {NATIVE: b.tmp / "git-native", GITSESS: b.tmp / "git-session"}
    rels = build_history_repo(repos[NATIVE], b.cfg, b.env)
    _run(["cp", "-a", str(repos[NATIVE]), str(repos[GITSESS])])
    git(repos[GITSESS], "update-index", "-q", "--refresh", env=b.env)
    for t in GIT_TARGETS:  # the changes `git diff` shows, and `git status` too
        for rel in rels[: DIFF_FILES * 50 : 50]:
            with open(repos[t] / rel, "ab") as f:
                f.write(b"# changed for git diff\n")
    os.sync()
    session = gitsess_new(b, repos[GITSESS], "bench-git")
    results = []
    try:
        for op in ops:
            res = Result(op.key, op.label, list(op.goals))
            if op.cold:
                _git_cold(b, op, repos, session, rels, res)
            else:
                _git_warm(b, op, repos, session, rels, res)
            progress(res)
            results.append(res)
    finally:
        subprocess.run(
            [GITSESS_CLI, "rm", session.name, "--force"], cwd=repos[GITSESS], env=b.env,
            capture_output=True,
        )  # fmt: skip
    b.notes.append(
        "git ... in a session: git run by one long-lived process natively in a repository of "
        f"5,000 files and {HISTORY_COMMITS + 1} commits, with {DIFF_FILES} files changed, and "
        "inside one long-lived `gitsess run` (in place) over a copy of it (its .git copy-on-write "
        "through the daemon); cold: caches dropped, a fresh `gitsess run` and daemon each run"
    )
    return results


def _git_warm(
    b: Bench, op: GitOp, repos: dict[str, Path], session: Session, rels: Sequence[str],
    res: Result,
) -> None:  # fmt: skip
    timers: dict[str, GitTimer] = {}
    try:
        for t in GIT_TARGETS:
            timers[t] = GitTimer(b, t, repos[t], session.name)
        live = mount.status(session_dir_of(session))
        pids = {NATIVE: None, GITSESS: live.daemon_pid if live is not None else None}
        for t in GIT_TARGETS:
            _git_op_once(timers[t], op, "warm-up", rels, pids[t])  # not counted
        for run in range(b.cfg.runs):
            for t in GIT_TARGETS[run % 2 :] + GIT_TARGETS[: run % 2]:
                res.add(t, *_git_op_once(timers[t], op, f"{t} {run}", rels, pids[t]))
    finally:
        for timer in timers.values():
            timer.close()
        _wait_unmounted(session_dir_of(session))


def _git_cold(
    b: Bench, op: GitOp, repos: dict[str, Path], session: Session, rels: Sequence[str],
    res: Result,
) -> None:  # fmt: skip
    for run in range(b.cfg.runs):
        for t in GIT_TARGETS[run % 2 :] + GIT_TARGETS[: run % 2]:
            timer = GitTimer(b, t, repos[t], session.name)
            try:
                live = mount.status(session_dir_of(session)) if t == GITSESS else None
                drop_caches()
                res.add(
                    t,
                    *_git_op_once(timer, op, f"{t} {run}", rels, live.daemon_pid if live else None),
                )
            finally:
                timer.close()
                _wait_unmounted(session_dir_of(session))
