"""Memory and speed of many sessions mounted at once (`fleet`, `first-status`), and the daemons'
memory on a big repository."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from bench.config import GITSESS, GITSESS_CLI, NATIVE, OVERLAYFS, console
from bench.corpus import Corpus
from bench.git_session import GitTimer
from bench.measure import Bench, progress, rotation, timed
from bench.results import Result
from bench.sessions import gitsess_cli
from bench.views import View
from bench.workloads import Goal, _run
from gitsess.git.repo import discover
from gitsess.runtime import mount


def run_wide_memory(b: Bench, repo: Path, rels: Sequence[str]) -> None:
    """Peak memory of both daemons after find, reading every file and git status of a big
    repository through them."""
    for target in (OVERLAYFS, GITSESS):
        with b.view(target, repo) as view:
            _run(["find", str(view.root)])
            for rel in rels:
                with open(view.root / rel, "rb") as f:
                    f.read()
            _run(["git", "status", "--porcelain"], cwd=view.root)
            b.memory.record(f"{len(rels):,}-file repo: find, read all, git status", view)


# ---------------------------------------------------------------------------------- fleets

FLEET = "fleet"
FIRST_STATUS = "first-status"  # --only: the fleet's first-status rows alone
FIRST_STATUS_MOUNT = "first-status-mount"


def _family(pid: int) -> list[int]:
    """`pid` and every process below it (a daemon: its guard and its watch process)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
    return found


def _memory_kib(pids: Sequence[int]) -> tuple[int, int]:
    """Resident and proportional set size (RSS, PSS) of `pids` together, in KiB: RSS counts a
    page shared by two processes twice (a forked guard's every page), PSS half in each."""
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == "Rss":
                    rss += int(rest.split()[0])
                elif key == "Pss":
                    pss += int(rest.split()[0])
    return rss, pss


def _watched(session_dir: Path) -> bool:
    from gitsess.overlay import protocol

    st = protocol.status(str(session_dir))
    return st is not None and st.watched


def run_fleet(b: Bench, corpus: Corpus) -> list[Result]:
    """`fleet_sessions` sessions of one repository mounted at once (idle, each watch in
    place): their processes' memory, against as many fuse-overlayfs mounts of it, with each
    daemon a process of its own (as a library call starts it) and forked from the user's spare
    (as `gitsess new --mount` starts it); then the first `git status` in a session just
    mounted, against native and a fresh fuse-overlayfs."""
    n = b.cfg.fleet_sessions
    for target in (OVERLAYFS, GITSESS):
        with contextlib.ExitStack() as stack:
            views = [stack.enter_context(b.view(target, corpus.repo)) for _ in range(n)]
            if target == GITSESS:
                _wait_watched([_session_dir_of(v) for v in views])
            pids = [p for v in views if v.pid is not None for p in _family(v.pid)]
            what = "daemons started by themselves" if target == GITSESS else target
            _fleet_note(b, n, what, pids)
    names = [f"fleet-{i}" for i in range(n)]
    try:
        ids = [
            str(json.loads(gitsess_cli(b, corpus.repo, "new", name, "--mount", "--json"))["id"])
            for name in names
        ]
        dirs = [discover(corpus.repo).session_dir(i) for i in ids]
        _wait_watched(dirs)
        daemons = [st.daemon_pid for st in (mount.status(d) for d in dirs) if st is not None]
        spares = {_parent(pid) for pid in daemons}
        _fleet_note(b, n, "daemons forked from the spare", [
            *spares, *(p for pid in daemons for p in _family(pid))
        ])  # fmt: skip
    finally:
        for name in names:
            subprocess.run(
                [GITSESS_CLI, "rm", name, "--force"], cwd=corpus.repo, env=b.env,
                capture_output=True, check=False,
            )  # fmt: skip
    return [*first_status(b, corpus), commits(b, corpus)]


COMMITS = 200
COMMITS_KEY = "commits"  # --only: the fleet's commits row alone


def commits(b: Bench, corpus: Corpus) -> Result:
    """`COMMITS` commits of one changed file each, one after another, as an agent makes them:
    inside `gitsess run` (in place, with the git settings a run gives git), timed from inside
    the run by `bench.git_timer`; natively in a copy of the repository made for each run, and
    in a fuse-overlayfs view over it, with the same settings but the fsmonitor hook (which
    only gitsess's daemon answers). Each run a fresh session or view."""
    from gitsess.services import live

    res = Result(COMMITS_KEY, f"{COMMITS} commits inside", [Goal(NATIVE, 1.3)])
    rel = corpus.files[0]
    plain = live.git_config_env(b.env, live.UNTRACKED_CACHE_CONFIG)
    for run in range(b.cfg.slow_runs):
        for target in rotation(run):
            # Lines of each run's and target's own: `rm` of a session archives its commits
            # into the corpus, and a native copy that then held their objects wrote 1 of 6.
            script = (
                f"for i in $(seq {COMMITS}); do echo {run}.{target}.$i >> {shlex.quote(rel)};"
                " git commit -qam c$i || exit 1; done"
            )
            commits = ["sh", "-c", script]
            if target == OVERLAYFS:
                with b.view(target, corpus.repo) as view:
                    step = functools.partial(_run, commits, view.root, {**b.env, **plain})
                    res.add(target, timed(step))
                continue
            name = f"commits-{run}"
            if target == GITSESS:
                res.add(target, _timed_in_place(b, target, corpus.repo, name, commits, plain))
                continue
            copy = b.scratch / name
            _run(["cp", "-a", str(corpus.repo), str(copy)])
            try:
                res.add(target, _timed_in_place(b, target, copy, name, commits, plain))
            finally:
                shutil.rmtree(copy, ignore_errors=True)
    progress(res)
    return res


def _timed_in_place(
    b: Bench, target: str, repo: Path, name: str, cmd: list[str], plain: dict[str, str]
) -> float:
    """`cmd` timed by `bench.git_timer`: for gitsess inside `gitsess run` of a new session
    `name` over `repo` (made and removed here), with the git settings a run gives git;
    natively in `repo`, with `plain` settings."""
    if target == GITSESS:
        gitsess_cli(b, repo, "new", name)
    try:
        timer = GitTimer(b, target, repo, name, None if target == GITSESS else plain)
        try:
            return timer.ask(cmd=cmd)
        finally:
            timer.close()
    finally:
        if target == GITSESS:
            subprocess.run(
                [GITSESS_CLI, "rm", name, "--force"], cwd=repo, env=b.env,
                capture_output=True, check=False,
            )  # fmt: skip


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def _wait_watched(dirs: Sequence[Path]) -> None:
    deadline = time.monotonic() + 120
    while not all(_watched(d) for d in dirs) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)


def _fleet_note(b: Bench, n: int, what: str, pids: Sequence[int]) -> None:
    rss, pss = _memory_kib(pids)
    b.notes.append(
        f"{n} sessions mounted, {what} ({len(pids)} processes): RSS {rss / 1024:.0f} MiB in "
        f"all, {rss / 1024 / n:.1f} per session; PSS {pss / 1024:.0f} MiB in all, "
        f"{pss / 1024 / n:.1f} per session"
    )
    console.log(b.notes[-1])


def _session_dir_of(view: View) -> Path:
    """The session dir of the daemon that serves `view` (the dir of its delta.db)."""
    assert view.pid is not None
    with open(f"/proc/{view.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return Path(os.fsdecode(argv[argv.index(b"--delta") + 1])).parent


def first_status(b: Bench, corpus: Corpus) -> list[Result]:
    """The first `git status` of a new session: as an agent meets it (`first_status_in_place`)
    and in a mounted view's own dir (`_first_status`)."""
    label = "first git status in a new session, in place (warm)"
    in_place = Result(FIRST_STATUS, label, [Goal(NATIVE, 2.0)])
    return [first_status_in_place(b, corpus.repo, in_place, b.cfg.runs), _first_status(b, corpus)]


def first_status_in_place(b: Bench, repo: Path, res: Result, runs: int) -> Result:
    """`git status` once in a new session, the way a coding agent's first command goes: a
    session made, then `gitsess run` mounts it and runs a command in place, whose first git
    command is the status (timed inside the run by `bench.git_timer`, so neither the run's
    start nor the mount is counted); natively, the same from a timer in the repository. Into
    `res`, `runs` times."""
    from gitsess.services import live

    plain = live.git_config_env(b.env, live.UNTRACKED_CACHE_CONFIG)
    status = ["git", "status", "--porcelain"]
    _run(status, cwd=repo)  # the page cache warm
    for run in range(runs):
        for target in rotation(run):
            if target == OVERLAYFS:
                continue  # (nothing runs in place over fuse-overlayfs)
            name = f"{res.key}-{run}"
            res.add(target, _timed_in_place(b, target, repo, name, status, plain))
    progress(res)
    return res


def _first_status(b: Bench, corpus: Corpus) -> Result:
    """`git status` once in a view just mounted (the page cache warm), in the view's own dir
    with the git settings of `gitsess run`; natively, the same `git status` in the repository."""
    from gitsess.services import live

    res = Result(
        FIRST_STATUS_MOUNT, "first git status in a new session, mount dir (warm)",
        [Goal(NATIVE, 2.0)],
    )  # fmt: skip
    # gitsess as `gitsess run` sets git up; natively and on fuse-overlayfs the untracked cache
    # alone (gitsess's hook would only answer "everything" there, after its own start).
    config = live.git_config_env(b.env, live.git_config_for(corpus.repo))
    plain = live.git_config_env(b.env, live.UNTRACKED_CACHE_CONFIG)
    _run(["git", "status", "--porcelain"], cwd=corpus.repo)  # the page cache warm
    for run in range(b.cfg.runs):
        for target in rotation(run):
            with b.view(target, corpus.repo) as view:
                env = {**b.env, **(config if target == GITSESS else plain)}
                if target == GITSESS:
                    # The hook finds the daemon at `$GITSESS_DIR/sessions/<id>`, as in a
                    # session made by `gitsess new`.
                    session_dir = _session_dir_of(view)
                    state = b.scratch / "hook-state"
                    (state / "sessions").mkdir(parents=True, exist_ok=True)
                    (state / "sessions" / session_dir.name).symlink_to(session_dir)
                    env["GITSESS_SESSION_ID"] = session_dir.name
                    env["GITSESS_DIR"] = str(state)
                status = functools.partial(_run, ["git", "status", "--porcelain"], view.root, env)
                res.add(target, timed(status))
    progress(res)
    return res
