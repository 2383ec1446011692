"""`apply --commit`, as the command line and the MCP server run it: optionally gated by a
test, and followed by the radar's word on which other sessions now conflict.

A gated apply (`test`) takes its turn on the branch (`branch_queue.turn`: one at a time, in
arrival order), builds the apply's result as a commit on a throwaway ref at the branch's tip
(the same apply, aimed elsewhere: the session's delta and base stay as they are), runs the test
in a throwaway session view of that commit over the real worktree (`result_view`), and applies
for real only if the test passed and the branch's tip is still the one tested; a moved tip
means building and testing again, up to `retries` more times. The test's output is kept in
the session dir, its run in the registry (`gitsess log` lists it).

The throwaway ref is `refs/gitsess/gate/<session-id>`: no branch of the worktree, so building
on it moves no base, drops nothing from the delta and touches no file; it goes right after.
While the result is built, the spare imports the overlay on the other core, for the trial
view's daemon. The test runs as `sh -c CMD` without the `GITSESS_*` variables: it is not inside
the session, and a gitsess it starts must not act on it. A live writer is not stopped: a session
written to between the test and the apply lands what it has then, and the outcome says so
when the committed tree is not the tested one. A plain `apply` or a `git commit` to the branch
meanwhile is what the retry is for.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gitsess.errors import GitsessError, option
from gitsess.git.apply_commit import branch_tip
from gitsess.git.repo import Person, RepoContext, Repository, drop_ref
from gitsess.git.trees import point_ref
from gitsess.runtime import prestart
from gitsess.services import branch_queue, overlaps, sessions, test_logs
from gitsess.services.apply import Applied, apply_to_commit
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import open_real, real_root
from gitsess.services.result_view import result_view
from gitsess.store.registry import Session

RETRIES = 3
OUTPUT_TAIL = 8192  # characters of a test's output that the outcome carries (the log has all)


@dataclass(frozen=True)
class TestRun:
    """A gated apply's test: what ran, on which commit, and how it ended."""

    command: str
    exit_code: int
    commit: str  # the tested commit: the apply's result on the tip below
    tip: str | None  # the branch tip it was built on
    attempts: int  # builds and tests, counting the retries after the tip moved
    log: Path  # the whole output
    output: str  # its last OUTPUT_TAIL characters

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "exit_code": self.exit_code,
            "passed": self.passed,
            "commit": self.commit,
            "tip": self.tip,
            "attempts": self.attempts,
            "log": str(self.log),
            "output": self.output,
        }


def commit(
    ctx: RepoContext,
    session: Session | SessionHandle,
    pathspecs: Sequence[str] = (),
    *,
    message: str,
    branch: str | None = None,
    author: Person | None = None,
    include_ignored: bool = False,
    force: bool = False,
    dry_run: bool = False,
    squash: bool = False,
    test: str | None = None,
    retries: int = RETRIES,
    queue_timeout: float | None = None,
) -> Applied:
    """`apply_to_commit`, gated by `test` when given (waiting at most `queue_timeout` seconds
    for the branch's turn); the outcome names the sessions that conflict with the branch once
    it landed (`now_conflicts`)."""
    if test is not None and not test.strip():
        raise GitsessError(f"{option('test')} needs a command")
    if retries < 0:
        raise GitsessError(f"{option('retries')} cannot be negative")
    if queue_timeout is not None and not queue_timeout >= 0:  # (NaN too: it waited forever)
        raise GitsessError(f"{option('queue-timeout')} cannot be negative")
    handle = SessionHandle.of(ctx, session)
    session = handle.row  # (as the command began: each attempt reads it anew)
    attempt = functools.partial(
        apply_to_commit, ctx, handle, pathspecs, message=message, author=author,
        include_ignored=include_ignored, squash=squash,
    )  # fmt: skip
    if test is None or dry_run:
        outcome = attempt(branch=branch, force=force, dry_run=dry_run)
    else:
        target = branch or session.branch
        if target is None:
            raise GitsessError(
                f"session {session.name} is on a detached HEAD; "
                f"give {option('branch')} to commit on"
            )
        # The spare (runtime/spare.py) imports the overlay on the other core while the result
        # is built, then forks the daemon of the test's view.
        with branch_queue.turn(ctx, target, queue_timeout), prestart.prestarted():
            land = functools.partial(attempt, branch=branch, force=force)
            outcome = _gated(ctx, session, target, test, retries, attempt, land)
    if outcome.ok and not dry_run and outcome.commit is not None and outcome.commit.commit:
        try:
            found = overlaps.overlaps(ctx)
        except GitsessError as e:
            # The commit landed: the radar's failure is worth a note, not a failed apply.
            return replace(outcome, notes=(*outcome.notes, f"conflict radar: {e}"))
        now = sorted({o.name for o in found if o.kind == "branch" and o.conflict} - {session.name})
        outcome = replace(outcome, now_conflicts=tuple(now))
    return outcome


def _gated(
    ctx: RepoContext,
    session: Session,
    target: str,
    test: str,
    retries: int,
    attempt: Callable[..., Applied],
    land: Callable[[], Applied],
) -> Applied:
    repo = open_real(session, real_root(session))
    for number in range(1, retries + 2):
        tip = branch_tip(repo, target)
        trial_ref = f"refs/gitsess/gate/{session.id}"
        if tip is not None:
            point_ref(repo, trial_ref, tip)
        try:
            trial = attempt(branch=trial_ref)
        finally:
            drop_ref(repo, trial_ref)
        if not trial.ok or trial.commit is None:
            return trial
        tested = trial.commit.commit or tip
        if tested is None:
            return trial  # nothing to commit on an unborn branch: nothing to test
        run = _run_test(ctx, session, repo, test, tested, tip, number)
        if not run.passed:
            return replace(trial, applied=(), dropped=(), kept=(), test=run, commit=None)
        if branch_tip(repo, target) != tip:
            continue  # the branch moved while testing: the tested result is not what lands
        outcome = land()
        landed = outcome.commit.tree if outcome.commit is not None else None
        if outcome.ok and landed != trial.commit.tree:
            # The session changed between the test and the apply (a live writer): what landed
            # is not what was tested. The branch has it now; say so rather than hide it.
            outcome = replace(
                outcome,
                notes=(*outcome.notes, "the session changed while its test ran: what was "
                       "committed differs from what was tested"),
            )  # fmt: skip
        return replace(outcome, test=run)
    raise GitsessError(
        f"{target} moved during each of {retries + 1} test runs; nothing was applied"
    )


def _run_test(
    ctx: RepoContext,
    session: Session,
    repo: Repository,
    command: str,
    commit: str,
    tip: str | None,
    attempt: int,
) -> TestRun:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITSESS_")}
    with result_view(ctx, session, repo, commit) as where:
        argv = ["/bin/sh", "-c", command]
        run_id = sessions.start_run(ctx, session, argv, where, test_logs.ROLE)
        log = test_logs.log_path(ctx, session.id, run_id)
        log.parent.mkdir(mode=0o700, exist_ok=True)
        code = 1
        try:
            with open(log, "wb") as out:
                code = subprocess.run(
                    argv, cwd=where, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, check=False,
                ).returncode  # fmt: skip
        finally:
            sessions.end_run(ctx, run_id, code)
    text = log.read_bytes()[-OUTPUT_TAIL:].decode(errors="replace")
    return TestRun(command, code, commit, tip, attempt, log, text)
