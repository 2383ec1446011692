"""`gitsess apply`: a session's changes to a commit, a patch or the real worktree.

A conflict is one line per path on stderr and exit status 1, with nothing changed: a script
tells success from the status alone. `-o FILE` is written aside and renamed in, so a patch
file is never left half written (a device such as `/dev/null` is written to, never replaced).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gitsess import durable
from gitsess.cli.base import (
    complete_session_first,
    echo_notes,
    print_json,
    short,
    takes_session,
)
from gitsess.cli.diff_cmds import warn_drift
from gitsess.cli.group import cli
from gitsess.cli.pathspec_args import PATHSPEC_HELP, PathspecCommand, target
from gitsess.errors import GitsessError
from gitsess.services import apply as applying
from gitsess.services.apply import Person
from gitsess.services.sessions import Session, discover

if TYPE_CHECKING:
    from gitsess.services.apply import PatchResult


_AUTHOR = re.compile(r"\s*(.*?)\s*<([^<>]*)>\s*")


def parse_author(text: str) -> Person:
    found = _AUTHOR.fullmatch(text)
    if found is None or not found.group(1) or not found.group(2):
        raise click.BadParameter(f"{text!r}: expected 'Name <email>'", param_hint="--author")
    return Person(found.group(1), found.group(2))


@cli.command(cls=PathspecCommand, epilog=PATHSPEC_HELP)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] [--] [PATHSPEC...]", shell_complete=complete_session_first
)
@takes_session
@click.option("--commit", "to_commit", is_flag=True, help="Commit on the session's branch.")
@click.option("--patch", "to_patch", is_flag=True, help="Write a patch (stdout or -o).")
@click.option("--worktree", "to_worktree", is_flag=True, help="Write into the real worktree.")
@click.option(
    "-m", "--message", help="Commit message (default: the title); --mbox subject and body."
)
@click.option("--author", metavar='"NAME <EMAIL>"', help="Commit (or --mbox) author.")
@click.option("--branch", metavar="BRANCH", help="Commit on BRANCH (made at the base if new).")
@click.option("--squash", is_flag=True, help="--commit: the session's own commits as one, with -m.")
@click.option("-o", "--output", metavar="FILE", help="--patch: write the patch to FILE.")
@click.option("--mbox", is_flag=True, help="--patch: a mail `git am` takes.")
@click.option("--force", is_flag=True, help="Overwrite real files changed outside the session.")
@click.option("--ignored", is_flag=True, help="Include paths .gitignore ignores.")
@click.option("--dry-run", "-n", is_flag=True, help="Show what would happen; change nothing.")
@click.option(
    "--test",
    metavar="CMD",
    help="--commit: run CMD (sh -c) on the result first; move the branch only if it exits 0.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="--test: build and test again this many times when the branch moved meanwhile.",
)
@click.option(
    "--queue-timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="--test: give up (changing nothing) after waiting this long for the branch's turn.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def apply(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    to_commit: bool,
    to_patch: bool,
    to_worktree: bool,
    message: str | None,
    author: str | None,
    branch: str | None,
    squash: bool,
    output: str | None,
    mbox: bool,
    force: bool,
    ignored: bool,
    dry_run: bool,
    test: str | None,
    retries: int,
    queue_timeout: float | None,
    as_json: bool,
) -> None:
    """Apply a session's changes: to a commit, a patch, or the real worktree.

    --commit first brings the commits made inside the session onto the branch (a fast-forward,
    or each re-applied onto a branch that moved; one commit with --squash), then commits the
    uncommitted changes on top. --commit and --worktree take the applied paths out of the
    session, which goes on (live mounts included); --patch leaves it as it is. On a conflict
    nothing changes: every conflicting path is listed on stderr and the exit status is 1.

    --commit --test CMD runs CMD in a throwaway session view of the result (the branch's tip
    with the session's work on it) and moves the branch only if CMD exits 0 and the tip did not
    move meanwhile (else it builds and tests again); CMD's output is kept in the session's log.
    Gated applies to one branch wait for each other, in the order they came.
    """
    if (squash or test is not None) and not to_commit:
        given = "--squash" if squash else "--test"
        raise click.UsageError(f"{given} does not apply to this target")
    if sum((to_commit, to_patch, to_worktree)) != 1:
        raise click.UsageError("give one of --commit, --patch, --worktree")
    if queue_timeout is not None and test is None:
        raise click.UsageError("--queue-timeout goes with --test")
    _check_options(
        to_commit=to_commit, to_patch=to_patch, message=message, author=author, branch=branch,
        output=output, mbox=mbox, force=force, as_json=as_json,
    )  # fmt: skip
    ctx = discover()
    handle, specs = target(ctx, args, offsets, session_option)
    session = handle.row  # (as the command began: the apply may move its base)
    signature = parse_author(author) if author is not None else None
    if to_commit:
        from gitsess.services import gate

        outcome = gate.commit(
            ctx, handle, specs, message=_message(message, session), branch=branch,
            author=signature, include_ignored=ignored, force=force, dry_run=dry_run,
            squash=squash, test=test, retries=retries, queue_timeout=queue_timeout,
        )  # fmt: skip
    elif to_patch:
        outcome = applying.apply_to_patch(
            ctx, handle, specs, mbox=mbox, message=_message(message, session),
            author=signature, include_ignored=ignored, dry_run=dry_run,
        )  # fmt: skip
    else:
        outcome = applying.apply_to_worktree(
            ctx, handle, specs, include_ignored=ignored, force=force, dry_run=dry_run
        )
    echo_notes(outcome.notes)
    if dry_run:
        warn_drift(ctx, session)
    if outcome.ok and outcome.patch is not None and not dry_run:
        _write_patch(outcome.patch, output)
    if as_json:
        print_json(outcome.to_json())
    else:
        _report(session, outcome, output)
    _report_radar(outcome)
    if not outcome.ok:
        for c in outcome.conflicts:
            click.echo(f"gitsess: conflict: {c.path}: {c.detail} ({c.reason})", err=True)
        reasons = {c.reason for c in outcome.conflicts}
        if reasons & _DIRTY:
            click.echo(
                "gitsess: the real worktree has changes of its own there: commit or stash them"
                " (git stash) and apply again, or pass --force to overwrite them",
                err=True,
            )
        elif "merge" in reasons:
            click.echo(
                "gitsess: the branch changed these paths too: bring them in the session to what "
                "they should be on top of it (edit them, or git rebase inside), then apply "
                "again; or --patch to merge by hand",
                err=True,
            )
        sys.exit(1)


def _report_radar(outcome: applying.Applied) -> None:
    """On stderr: how a gated apply's test went, and whom the branch now conflicts with."""
    t = outcome.test
    if t is not None:
        verdict = "passed" if t.passed else f"failed (exit {t.exit_code}); nothing was applied"
        click.echo(
            f"gitsess: test {verdict}: {t.command} (on {short(t.commit)}, attempt {t.attempts};"
            f" output in {t.log})",
            err=True,
        )
    if outcome.now_conflicts:
        click.echo(
            "gitsess: the branch now conflicts with session(s): "
            + ", ".join(outcome.now_conflicts),
            err=True,
        )


# What a user can do about a conflict the real worktree's own changes cause.
_DIRTY = {"local-change", "worktree-changed", "worktree-exists", "parent-changed"}


def _check_options(
    *,
    to_commit: bool,
    to_patch: bool,
    message: str | None,
    author: str | None,
    branch: str | None,
    output: str | None,
    mbox: bool,
    force: bool,
    as_json: bool,
) -> None:
    rules = (
        ("--branch", branch is not None, to_commit),
        ("-m/--message", message is not None, to_commit or mbox),
        ("--author", author is not None, to_commit or mbox),
        ("-o/--output", output is not None, to_patch),
        ("--mbox", mbox, to_patch),
        ("--force", force, not to_patch),
    )
    for name, given, allowed in rules:
        if given and not allowed:
            raise click.UsageError(f"{name} does not apply to this target")
    if to_patch and as_json and output in (None, "-"):
        raise click.UsageError("--patch --json prints JSON on stdout: give the patch -o FILE")


def _message(given: str | None, session: Session) -> str:
    """The message given (an empty one too, which the commit refuses, as git does), else one
    from the session's title."""
    if given is not None:
        return given
    return session.title or f"Changes from gitsess session {session.name}"


def _write_patch(patch: PatchResult, output: str | None) -> None:
    if output is None or output == "-":
        sys.stdout.flush()
        patch.write_to(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    target = Path(output)
    if target.exists() and not target.is_file():
        # A device or a pipe (`-o /dev/null`, `-o /dev/stderr`): written to, never renamed
        # over (as root, a rename made /dev/null a regular file).
        try:
            with open(target, "wb") as f:
                patch.write_to(f)
        except OSError as e:
            raise GitsessError(f"cannot write {output}: {e.strerror}") from e
        return
    try:
        with durable.write_aside(target) as f:
            patch.write_to(f)
    except OSError as e:
        raise GitsessError(f"cannot write {output}: {e.strerror}") from e


def _made(outcome: applying.Applied) -> str:
    """What reached the branch, as "1 commit replayed, 1 new commit with 2 paths"."""
    parts = []
    if outcome.promoted and not outcome.squashed:
        how = "fast-forwarded" if outcome.fast_forward else "replayed"
        parts.append(f"{_plural(len(outcome.replayed), 'commit')} {how}")
    if outcome.new_commit is not None:
        paths = _plural(outcome.new_commit_paths, "path")
        parts.append(f"{'1 new commit' if parts else 'a new commit'} with {paths}")
    elif parts:
        parts.append("no new commit")
    return ", ".join(parts)


def _commit_paths(outcome: applying.Applied, count: str) -> str:
    """The paths of the commit (not those only written to the worktree: an empty directory);
    `count`, the applied paths, for a new branch's first commit, which no parent is diffed with."""
    c = outcome.commit
    if c is None or c.parent is None:
        return count
    return _plural(outcome.new_commit_paths, "path")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _report(session: Session, outcome: applying.Applied, output: str | None) -> None:
    # plain lines with click: loading rich would add about a twentieth to an apply
    if not outcome.ok:
        return
    # A directory that appears or goes with the files in it is not one more path to the user.
    held = {p.rpartition("/")[0] for p in outcome.applied}
    count = f"{sum(1 for p in outcome.applied if p not in held)} path(s)"
    if not outcome.applied and not outcome.promoted:
        click.echo("Nothing to apply.", err=True)
    elif outcome.commit is not None:
        c = outcome.commit
        branch = c.branch.removeprefix("refs/heads/")
        merged = " (merged three-way: the branch moved since the session's base)"
        merged = merged if c.merged else ""
        if outcome.dry_run:
            if outcome.promoted:
                how = " as one" if outcome.squashed else ""
                click.echo(f"Would take the session's {len(outcome.promoted)} commit(s){how}")
            if outcome.promoted and not outcome.squashed:
                paths = outcome.new_commit_paths
                made = f"a new commit with {_plural(paths, 'path')}" if paths else "no new commit"
                click.echo(f"Would make {made} on {branch} on top of them{merged}")
            else:
                click.echo(f"Would commit {_commit_paths(outcome, count)} on {branch}{merged}")
        elif c.commit is None:
            click.echo(f"Nothing to commit: {branch} already has these changes")
        elif not outcome.promoted:
            committed = _commit_paths(outcome, count)
            click.echo(f"Committed {short(c.commit)} on {branch}: {committed}{merged}")
        else:
            click.echo(f"{branch} at {short(c.commit)}: {_made(outcome)}{merged}")
        if not c.worktree_updated:
            click.echo(
                f"gitsess: {branch} is not checked out in {session.worktree}: the changes stay "
                "in the session",
                err=True,
            )
    elif outcome.patch is not None:
        where = "stdout" if output in (None, "-") else output
        click.echo(
            f"{'Would write' if outcome.dry_run else 'Wrote'} a patch of {count} to {where}",
            err=True,
        )
    else:
        done = "Would apply" if outcome.dry_run else "Applied"
        click.echo(f"{done} {count} to {session.worktree}")
    if outcome.dry_run and outcome.patch is None:
        for path in outcome.applied:
            click.echo(f"  {path}")
    if outcome.skipped:
        why = "git cannot carry them" if outcome.target != "worktree" else "they hold others"
        click.echo(f"gitsess: left in the session ({why}): {', '.join(outcome.skipped)}", err=True)
    if outcome.kept:
        click.echo(
            "gitsess: written to in the session during the apply, so kept there: "
            + ", ".join(outcome.kept),
            err=True,
        )
