"""`gitsess discard`: drop a session's changes, all of them or the paths given.

It lists what would go and asks, unless `-y`; without a terminal to ask on it refuses rather
than guess, since what it drops exists nowhere else.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from gitsess.cli.base import (
    complete_session_first,
    console,
    echo_notes,
    escape,
    print_json,
    takes_session,
)
from gitsess.cli.diff_cmds import status_letter
from gitsess.cli.group import cli
from gitsess.cli.pathspec_args import PATHSPEC_HELP, PathspecCommand, target
from gitsess.errors import GitsessError
from gitsess.services import discard as discarding
from gitsess.services.sessions import Session, discover


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
    handle, specs = target(ctx, args, offsets, session_option)
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
    echo_notes(notes)
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
        echo_notes(notes)
    done = discarding.discard(ctx, session, plan)
    echo_notes(done.notes)
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
