"""Commands that apply a session's work: diff, apply, discard, fork, restore, archives.

`diff`, `apply` and `discard` take `[SESSION] [--] [PATHSPEC...]` (`PathspecCommand` keeps what
follows `--` aside before click parses): the first word is the session when it resolves to one,
else a pathspec; a word that is both, or neither, is a usage error (git's rule for revisions
and paths), which `--` or `-s` settles. Pathspecs relative to the current directory are made
root-relative here (`root_pathspecs`), since the services take git's root-relative ones.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gitsess import durable
from gitsess.cli.base import (
    SessionCommand,
    ago,
    complete_archive,
    complete_session_first,
    console,
    escape,
    print_json,
    session_ref,
    short,
    takes_session,
    value_options,
)
from gitsess.cli.group import cli
from gitsess.errors import GitsessError
from gitsess.services import apply as applying
from gitsess.services import discard as discarding
from gitsess.services import sessions
from gitsess.services.apply import Change, Person
from gitsess.services.handle import SessionHandle
from gitsess.services.sessions import RepoContext, Session, discover

if TYPE_CHECKING:
    from gitsess.services.apply import PatchResult

_AFTER = "gitsess.after_dashdash"

PATHSPEC_HELP = """
The first argument is the session if it names one, else the first pathspec; a name that is
both a session and a path here is an error. Put pathspecs after `--` (`gitsess diff exp --
src`) or name the session with -s to leave no doubt; after `--`, pathspecs need not match any
file. Pathspecs are git's, relative to the current directory (`:/` and `:(top)` start at the
top, `:!` excludes, `*` globs).
"""


class PathspecCommand(SessionCommand):
    """`[SESSION] [--] [PATHSPEC...]`: what follows `--` is kept aside as pathspecs."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        before, after = _split_dashdash(self, args)
        ctx.meta[_AFTER] = after
        return super().parse_args(ctx, before)


def _split_dashdash(command: click.Command, args: list[str]) -> tuple[list[str], list[str] | None]:
    takes_value = value_options(command)
    before: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            return before, list(rest)
        before.append(arg)
        if arg in takes_value:
            value = next(rest, None)
            if value is not None:
                before.append(value)
    return before, None


def split_positional(
    positional: Sequence[str],
    after: Sequence[str] | None,
    *,
    explicit: bool,
    is_session: Callable[[str], bool],
    is_path: Callable[[str], bool],
) -> tuple[str | None, list[str]]:
    """(the positional session or None, the pathspecs), by the rule in PATHSPEC_HELP.

    `after` is what followed `--` (None without `--`); `explicit` says the session was given
    with -s or -N.
    """
    if after is not None:
        if len(positional) > 1 or (positional and explicit):
            raise click.UsageError("only the session goes before `--`; pathspecs go after it")
        return (positional[0] if positional else None), list(after)
    if explicit or not positional:
        return None, list(positional)
    first = positional[0]
    if is_session(first):
        if is_path(first):
            raise click.UsageError(
                f"{first!r} is both a session and a path here: use -s SESSION, or put "
                "pathspecs after `--`"
            )
        return first, list(positional[1:])
    if is_path(first) or first.startswith(":") or any(c in first for c in "*?["):
        return None, list(positional)
    raise click.UsageError(
        f"{first!r} is neither a session nor a path here; put pathspecs that match no file "
        "after `--`"
    )


def _target(
    ctx: RepoContext,
    positional: Sequence[str],
    offsets: Sequence[str],
    option: str | None,
) -> tuple[SessionHandle, list[str]]:
    """The session and its root-relative pathspecs from a command's arguments."""
    found: dict[str, Session] = {}  # (what `is_session` resolved is the session, when it is)

    def is_session(text: str) -> bool:
        # Only "no such session": a registry that cannot be read is that error, not a guess.
        try:
            found[text] = sessions.resolve(ctx, text)
        except sessions.NoSuchSession:
            return False
        return True

    after = click.get_current_context().meta.get(_AFTER)
    first, specs = split_positional(
        positional,
        after,
        explicit=bool(offsets) or option is not None,
        is_session=is_session,
        is_path=os.path.lexists,
    )
    ref, _ = session_ref([first] if first is not None else [], 0, offsets, option)
    row = found.get(ref) if ref is not None else None
    handle = SessionHandle(ctx, row or sessions.resolve(ctx, ref))
    if not specs:
        return handle, []
    roots = [handle.row.worktree, handle.mountpoint()]
    if ctx.worktree is not None:
        roots.append(ctx.worktree)
    return handle, applying.root_pathspecs(specs, Path.cwd(), roots)


def _notes(notes: Sequence[str]) -> None:
    for note in notes:
        click.echo(f"gitsess: {note}", err=True)


def _out(data: bytes) -> None:
    # patches are bytes (content need not be UTF-8): past the text layer, after what it holds
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


# ---------------------------------------------------------------------------------------------
# diff

_BOLD, _RED, _GREEN, _CYAN, _RESET = b"\x1b[1m", b"\x1b[31m", b"\x1b[32m", b"\x1b[36m", b"\x1b[m"
_HUNK = re.compile(rb"^(@@ [^@]* @@)(.*)$", re.DOTALL)


def colour_patch(patch: bytes) -> bytes:
    """Colour a patch as `git diff --color` does: headers bold, hunk ranges cyan, removed lines
    red, added lines green. Inside a hunk a line starting `---` is a removed line, not a
    header."""
    out: list[bytes] = []
    in_hunk = False
    for line in patch.splitlines(keepends=True):
        body, eol = (line[:-1], b"\n") if line.endswith(b"\n") else (line, b"")
        if body.startswith(b"diff --git "):
            in_hunk = False
        hunk = _HUNK.match(body)
        if hunk is not None:
            in_hunk = True
            out.append(_CYAN + hunk.group(1) + _RESET + hunk.group(2) + eol)
        elif in_hunk and body.startswith(b"+"):
            out.append(_GREEN + body + _RESET + eol)
        elif in_hunk and body.startswith(b"-"):
            out.append(_RED + body + _RESET + eol)
        elif in_hunk:
            out.append(line)
        else:
            out.append(_BOLD + body + _RESET + eol)
    return b"".join(out)


@cli.command(cls=PathspecCommand, epilog=PATHSPEC_HELP)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] [--] [PATHSPEC...]", shell_complete=complete_session_first
)
@takes_session
@click.option("--stat", "show_stat", is_flag=True, help="Files changed and lines added/removed.")
@click.option("--name-status", is_flag=True, help="Status letter and path of each file.")
@click.option("--name-only", is_flag=True, help="Paths only.")
@click.option("--binary", is_flag=True, help="Binary files as patches `git apply` takes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (patch text included).")
@click.option("-M", "--find-renames", is_flag=True, help="Show renames as renames.")
@click.option("--ignored", is_flag=True, help="Include paths .gitignore ignores.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour the patch (auto: on a terminal, unless NO_COLOR is set).",
)
@click.option("--from", "from_cp", type=int, metavar="CP", help="From a checkpoint instead.")
@click.option("--to", "to_cp", type=int, metavar="CP", help="With --from: to this checkpoint.")
def diff(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    show_stat: bool,
    name_status: bool,
    name_only: bool,
    binary: bool,
    as_json: bool,
    find_renames: bool,
    ignored: bool,
    color: str,
    from_cp: int | None,
    to_cp: int | None,
) -> None:
    """Show what a session changed against its real worktree, content compared."""
    if sum((show_stat, name_status, name_only, as_json)) > 1:
        raise click.UsageError("give one of --stat, --name-status, --name-only, --json")
    ctx = discover()
    handle, specs = _target(ctx, args, offsets, session_option)
    session = handle.row
    if from_cp is not None or to_cp is not None:
        _diff_checkpoints(ctx, session, specs, from_cp, to_cp, name_status or name_only, as_json)
        return
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else 80
    result, notes = applying.diff(
        ctx,
        handle,
        specs,
        include_ignored=ignored,
        binary=binary,
        find_renames=find_renames,
        stat_width=width,
    )
    _notes(notes)
    _warn_drift(ctx, session)
    if as_json:
        print_json(result.to_json())
    elif show_stat:
        click.echo(result.stat, nl=False)
    elif name_status or name_only:
        for line in result.name_status() if name_status else result.name_only():
            click.echo(line)
    else:
        patch = result.patch()
        auto = tty and not os.environ.get("NO_COLOR")  # https://no-color.org, as ls and doctor
        _out(colour_patch(patch) if color == "always" or (color == "auto" and auto) else patch)


def _diff_checkpoints(
    ctx: RepoContext,
    session: Session,
    specs: list[str],
    from_cp: int | None,
    to_cp: int | None,
    names: bool,
    as_json: bool,
) -> None:
    from gitsess.services import checkpoints

    if from_cp is None:
        raise click.UsageError("--to needs --from")
    changes = checkpoints.compare(ctx, session, from_cp, to_cp, specs)
    if as_json:
        print_json([asdict(c) for c in changes])
    elif names:
        for c in changes:
            click.echo(f"{c.status}\t{c.path}")
    else:
        _out("".join(c.patch for c in changes).encode())


def _warn_drift(ctx: RepoContext, session: Session) -> None:
    """On stderr, so a patch on stdout stays whole: paths the real worktree changed too."""
    from gitsess.services import inspection

    drifted = [d.path for d in inspection.drift(session, ctx.session_dir(session.id))]
    if drifted:
        click.echo(
            "gitsess: warning: the real worktree also changed (drift): " + ", ".join(drifted),
            err=True,
        )


# ---------------------------------------------------------------------------------------------
# apply

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
    handle, specs = _target(ctx, args, offsets, session_option)
    session = handle.row  # (as the command began: the apply may move its base)
    signature = parse_author(author) if author is not None else None
    if to_commit:
        from gitsess.services import gate

        outcome = gate.commit(
            ctx, handle, specs, message=message or _default_message(session), branch=branch,
            author=signature, include_ignored=ignored, force=force, dry_run=dry_run,
            squash=squash, test=test, retries=retries, queue_timeout=queue_timeout,
        )  # fmt: skip
    elif to_patch:
        outcome = applying.apply_to_patch(
            ctx, handle, specs, mbox=mbox, message=message or _default_message(session),
            author=signature, include_ignored=ignored, dry_run=dry_run,
        )  # fmt: skip
    else:
        outcome = applying.apply_to_worktree(
            ctx, handle, specs, include_ignored=ignored, force=force, dry_run=dry_run
        )
    _notes(outcome.notes)
    if dry_run:
        _warn_drift(ctx, session)
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


def _default_message(session: Session) -> str:
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
            click.echo(f"Would commit {count} on {branch}{merged}")
        elif c.commit is None:
            click.echo(f"Nothing to commit: {branch} already has these changes")
        elif not outcome.promoted:
            click.echo(f"Committed {short(c.commit)} on {branch}: {count}{merged}")
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


# ---------------------------------------------------------------------------------------------
# discard


def status_letter(change: Change) -> str:
    if change.old is None:
        return "A"
    if change.new is None:
        return "D"
    return "T" if change.old.kind != change.new.kind else "M"


@cli.command(cls=PathspecCommand, epilog=PATHSPEC_HELP)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] [--] [PATHSPEC...]", shell_complete=complete_session_first
)
@takes_session
@click.option("-y", "--yes", is_flag=True, help="Do not ask first.")
@click.option(
    "--commits",
    is_flag=True,
    help="Drop the commits made inside the session instead; their changes stay as files.",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Drop the session's commits and every change: the session as it started.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON (needs -y).")
def discard(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    yes: bool,
    commits: bool,
    everything: bool,
    as_json: bool,
) -> None:
    """Drop a session's changes (all, or those PATHSPECs select; ignored paths included).

    The session's own commits stay (their changes are not in the files' diff): --commits drops
    them, keeping what they changed as files; --all drops both.
    """
    if commits and everything:
        raise click.UsageError("give one of --commits, --all")
    if as_json and not yes:
        raise click.UsageError("--json prints no question: pass -y too")
    ctx = discover()
    handle, specs = _target(ctx, args, offsets, session_option)
    session = handle.row
    if (commits or everything) and specs:
        raise click.UsageError(f"--{'commits' if commits else 'all'} takes no pathspecs")
    from gitsess.services import inspection

    own = inspection.own_commits(ctx, session) if commits or everything else []

    def say(text: str) -> None:
        if not as_json:
            console().print(text)

    for c in own:
        say(f"commit {c.commit[:10]} {escape(c.subject)}")
    if commits:
        if not own:
            # nothing to lose: a `.git` the session broke still follows its branch again
            discarding.discard_commits(ctx, session)
            click.echo("No commits of the session's own.", err=True)
            _discard_json(as_json, session, [], None)
            return
        _confirm(yes, f"Drop these {len(own)} commit(s) from session {session.name}?")
        gone = discarding.discard_commits(ctx, session)
        _discard_json(as_json, session, gone, None)
        if not as_json:
            click.echo(
                f"Dropped {len(gone)} commit(s) from session {session.name}; "
                "their changes stay in its files"
            )
        return
    plan, notes = discarding.plan_discard(ctx, session, specs)
    _notes(notes)
    if not plan.drop and not plan.revert and not own:
        click.echo("Nothing to discard.", err=True)
        _discard_json(as_json, session, [], None)
        return
    for change in plan.changes:
        say(f"{status_letter(change)}  {escape(change.path)}")
    what = "these commits and changes" if own else "these changes"
    _confirm(yes, f"Discard {what} from session {session.name}?")
    dropped: tuple[str, ...] = ()
    if own:
        dropped = discarding.discard_commits(ctx, session)
        # What the commits changed is in the files now: the plan is made again to take it.
        plan, notes = discarding.plan_discard(ctx, session, specs)
        _notes(notes)
    done = discarding.discard(ctx, session, plan)
    _notes(done.notes)
    _discard_json(as_json, session, dropped, done)
    if not as_json:
        console().print(
            f"Discarded {len(plan.changes)} change(s)"
            + (f" and {len(dropped)} commit(s)" if dropped else "")
            + f" from session {escape(session.name)}"
        )
    if done.kept:
        click.echo(
            "gitsess: written to in the session meanwhile, so kept: " + ", ".join(done.kept),
            err=True,
        )


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise GitsessError("discard asks first: answer on a terminal, or pass -y")
    click.confirm(question, abort=True, err=True)


def _discard_json(
    as_json: bool,
    session: Session,
    commits: Sequence[str],
    done: discarding.Discarded | None,
) -> None:
    if not as_json:
        return
    print_json(
        {
            "name": session.name,
            "id": session.id,
            "dropped_commits": list(commits),
            "dropped": [] if done is None else list(done.dropped),
            "reverted": [] if done is None else list(done.reverted),
            "kept": [] if done is None else list(done.kept),
            "notes": [] if done is None else list(done.notes),
        }
    )


# ---------------------------------------------------------------------------------------------
# fork, archives, restore


@cli.command(cls=SessionCommand)
@click.argument(
    "args", nargs=-1, metavar="[SESSION] NEW_NAME", shell_complete=complete_session_first
)
@takes_session
@click.option(
    "--at",
    "at",
    type=int,
    metavar="CHECKPOINT",
    help="Start from the session as it was at this checkpoint (`gitsess checkpoints`).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the new session as JSON.")
def fork(
    args: tuple[str, ...],
    offsets: tuple[str, ...],
    session_option: str | None,
    at: int | None,
    as_json: bool,
) -> None:
    """A new session NEW_NAME with a copy of a session's changes, on the same worktree."""
    from gitsess.services import fork as forking

    ref, (new_name,) = session_ref(args, 1, offsets, session_option)
    ctx = discover()
    source = sessions.resolve(ctx, ref)
    made = forking.fork(ctx, source, new_name, at=at)
    if as_json:
        print_json(asdict(made))
        return
    console().print(
        f"Forked session [bold]{escape(source.name)}[/] into [bold]{escape(made.name)}[/] "
        f"({made.id[:8]})"
    )


# The archive's fields in the JSON vocabulary (docs/json.md).
_ARCHIVE_KEYS = {"base": "base_commit", "session_id": "id"}


@cli.command("archives")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def archives_command(as_json: bool) -> None:
    """List archived sessions (`rm` archives unapplied changes; `restore` brings them back)."""
    from rich.table import Table

    from gitsess.services import archives

    found = archives.archives(discover())
    if as_json:
        print_json(
            [
                {
                    **{_ARCHIVE_KEYS.get(k, k): v for k, v in asdict(a.info).items()},
                    "changed_files": a.files,
                    "restore": a.info.ref_name,
                }
                for a in found
            ]
        )
        return
    if not found:
        console().print("No archived sessions.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "FILES", "ARCHIVED", "BRANCH", "BASE", "COMMIT", "TITLE"):
        table.add_column(column, no_wrap=column != "TITLE")
    for a in found:
        i = a.info
        table.add_row(
            escape(i.ref_name),
            str(a.files),
            ago(i.archived_at),
            escape(i.branch or "-"),
            short(i.base),
            short(i.commit),
            escape(i.title),
        )
    console().print(table)


@cli.command()
@click.argument("name", shell_complete=complete_archive)
@click.option("--as", "new_name", metavar="NEW_NAME", help="Name the restored session this.")
@click.option("--json", "as_json", is_flag=True, help="Print the session as JSON.")
def restore(name: str, new_name: str | None, as_json: bool) -> None:
    """Bring back a session archived as NAME (see `gitsess archives`)."""
    from gitsess.services import archives

    done = archives.restore(discover(), name, new_name)
    _notes(done.notes)
    if as_json:
        print_json(asdict(done.session))
        return
    s = done.session
    console().print(
        f"Restored session [bold]{escape(s.name)}[/] ({s.id[:8]}): {done.files} path(s) on "
        f"{escape(str(s.worktree))}"
    )
