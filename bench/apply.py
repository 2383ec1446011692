"""The `gitsess diff` / `apply --commit` rows of 1,000 changed files."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from bench.config import GITSESS, GITSESS_CLI, OVERLAYFS
from bench.corpus import Corpus, git
from bench.fmt import fmt_time
from bench.measure import Bench, progress, rotation, timed
from bench.results import Result
from bench.sessions import cli_mounted, new_session
from bench.workloads import _run

# ---------------------------------------------------------------------------------- diff / apply


def _change_files(root: Path, rels: Sequence[str], tag: str) -> None:
    """Append a line naming the target and run: every commit then has blobs git lacks, as an
    apply of real work does (the same line each time would leave git holding them after the
    first run)."""
    line = f"# changed by the benchmark: {tag}\n".encode()
    for rel in rels:
        with open(root / rel, "ab") as f:
            f.write(line)


def _apply_through(
    b: Bench, target: str, repo: Path, rels: Sequence[str], run: int, later: contextlib.ExitStack
) -> tuple[float, float, float]:
    """git diff and git commit -a in a fresh worktree, directly or through fuse-overlayfs; then,
    for fuse-overlayfs, what its user does to bring the real worktree to that commit (the work
    `apply --commit` does too): unmount and copy the upper directory into the worktree. Returns
    the diff, the commit alone, and the commit with the worktree brought to it. The worktree
    and the view are removed with `later`."""
    wt, branch = b.scratch / f"apply-{target}-{run}", f"bench-apply-{target}-{run}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(wt), env=b.env)
    later.callback(git, repo, "branch", "-q", "-D", branch, env=b.env)
    later.callback(git, repo, "worktree", "remove", "--force", str(wt), env=b.env)
    view = later.enter_context(b.view(target, wt))
    _change_files(view.root, rels, f"{target}, run {run}")
    os.sync()  # the setup's writeback is not the measured commands' work
    t_diff = timed(lambda: _run(["git", "diff"], view.root, b.env))
    t_commit = timed(lambda: _run(["git", "commit", "-qam", "bench"], view.root, b.env))
    t_merge = 0.0
    if view.upper is not None:
        _run(["fusermount3", "-u", str(view.root)])
        upper = view.upper
        t_merge = timed(lambda: _run(["cp", "-a", f"{upper}/.", f"{wt}/"]))
    return t_diff, t_commit, t_commit + t_merge


def _apply_gitsess(
    b: Bench, repo: Path, rels: Sequence[str], run: int, later: contextlib.ExitStack
) -> tuple[float, float]:
    """`gitsess diff` and `gitsess apply --commit` of a session on a worktree of its own,
    edited through its mount and unmounted again (as after `gitsess run`); the session is
    removed with `later`."""
    name = f"bench-apply-{run}"
    session = later.enter_context(new_session(b, repo, name, "--worktree"))
    with cli_mounted(b, repo, session) as view:
        _change_files(view.root, rels, f"{GITSESS}, run {run}")
    os.sync()
    t_diff = timed(lambda: _run([GITSESS_CLI, "diff", name], repo, b.env))
    t_commit = timed(
        lambda: _run([GITSESS_CLI, "apply", name, "--commit", "-m", "bench"], repo, b.env)
    )
    return t_diff, t_commit


def run_apply(b: Bench, corpus: Corpus) -> list[Result]:
    """Worktrees, views and sessions are removed only after the last run: ext4 allocates
    inodes slowly for a while after thousands were freed (`recently_deleted`, seen with
    perf), which would slow whichever target followed a clean-up and created files."""
    n = b.cfg.changed_files
    diff = Result("diff", f"diff of {n:,} changed files")
    commit = Result("apply-commit", f"apply --commit of {n:,} changed files")
    commit_only: list[float] = []
    rels = [f for f in corpus.files if f.startswith("src/")][:n]
    with contextlib.ExitStack() as later:
        for run in range(b.cfg.apply_runs):
            for t in rotation(run):
                if t == GITSESS:
                    d, c = _apply_gitsess(b, corpus.repo, rels, run, later)
                else:
                    d, alone, c = _apply_through(b, t, corpus.repo, rels, run, later)
                    if t == OVERLAYFS:
                        commit_only.append(alone)
                diff.add(t, d)
                commit.add(t, c)
    progress(diff)
    progress(commit)
    b.notes.append(
        "diff / apply --commit: native runs `git diff` and `git commit -a` in a fresh worktree "
        "where the files were changed; fuse-overlayfs runs them in its mount over such a worktree, "
        "then is unmounted and its upper directory copied into the worktree (`cp -a`), which "
        "brings the real worktree to the commit as `apply --commit` does; gitsess runs `gitsess "
        "diff` and `gitsess apply --commit` on an unmounted session with a worktree of its own. "
        "`git commit -a` alone in the fuse-overlayfs mount: "
        + fmt_time(statistics.median(commit_only))
    )
    return [diff, commit]
