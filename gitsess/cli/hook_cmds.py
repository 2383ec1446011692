"""Git hooks: `hooks install`, `hooks uninstall`, and `hook NAME ARGS` (what the scripts run)."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

import click

from gitsess.cli.base import console, escape, print_json
from gitsess.cli.group import cli
from gitsess.services import gc, hooks
from gitsess.services.sessions import discover

_DONE = {
    "remove": "removed",
    "unmount": "unmounted",
    "delete": "deleted",
    "mark-merged": "marked merged",
    "mark-detached": "marked detached",
    "mark-active": "marked active",
    "rebind": "rebound",
    "drop": "dropped committed changes from",
    "move-base": "moved the base of",
    "complete": "completed the interrupted apply of",
    "end": "ended",
    "trim": "trimmed the history of",
}
_PLAN = {
    "remove": "would remove",
    "unmount": "would unmount",
    "delete": "would delete",
    "mark-merged": "would mark merged",
    "mark-detached": "would mark detached",
    "mark-active": "would mark active",
    "rebind": "would rebind",
    "drop": "would drop committed changes from",
    "move-base": "would move the base of",
    "complete": "would complete the interrupted apply of",
    "end": "would end",
    "trim": "would trim the history of",
}


def action_line(action: gc.Action) -> str:
    """One line saying what a sweep did, would do, or could not do."""
    if action.error is not None:
        return f"could not {action.verb} {action.what} {action.name}: {action.error}"
    verb = (_DONE if action.done else _PLAN)[action.verb]
    return f"{verb} {action.what} {action.name}: {action.reason}"


def hook_lines(actions: list[gc.Action]) -> list[str]:
    """What a hook did, a line per action; the same action for the same reason on several
    sessions (a checkout marks every session of the worktree detached) is one line."""
    groups: dict[object, list[gc.Action]] = {}
    for n, action in enumerate(actions):
        alone = action.error is not None or action.notes or not action.done
        key = n if alone else (action.verb, action.what, action.reason)
        groups.setdefault(key, []).append(action)
    out = []
    for first, *more in groups.values():
        if more:
            names = ", ".join(a.name for a in (first, *more))
            out.append(
                f"{_DONE[first.verb]} {1 + len(more)} {first.what}s ({names}): {first.reason}"
            )
        else:
            out.append(action_line(first))
            out.extend(f"  {note}" for note in first.notes)
    return out


@cli.group("hooks")
def hooks_group() -> None:
    """Git hooks that let sessions follow what git does to their branches and worktrees."""


@hooks_group.command("install")
@click.option(
    "--command",
    "command",
    metavar="CMD",
    help="How the hooks start gitsess, as shell words (default: this Python with -m gitsess).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def install(command: str | None, as_json: bool) -> None:
    """Install the hooks (honours core.hooksPath; a hook already there is kept and runs first)."""
    words = shlex.split(command) if command is not None else hooks.default_command()
    if not words:
        raise click.UsageError("--command is empty")
    _show(hooks.install(discover(), words), as_json)


@hooks_group.command("uninstall")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def uninstall(as_json: bool) -> None:
    """Remove the hooks and put back the ones they kept."""
    _show(hooks.uninstall(discover()), as_json)


def _show(report: hooks.HooksReport, as_json: bool) -> None:
    if as_json:
        print_json(asdict(report))
        return
    for hook in report.hooks:
        line = f"{hook.outcome:<9} {escape(str(hook.path))}"
        if hook.user_hook is not None:
            what = "runs first" if hook.outcome in ("installed", "updated", "unchanged") else "back"
            line += f" (your hook {escape(hook.user_hook.name)} {what})"
        console().print(line)
    for note in report.notes:
        click.echo(f"gitsess: {note}", err=True)


@cli.command(
    "hook",
    hidden=True,
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name", type=click.Choice(hooks.HOOKS))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook(name: str, args: tuple[str, ...]) -> None:
    """What the installed hook scripts run: act on git's event. Always exits 0."""
    stdin = sys.stdin.read() if name in hooks.STDIN_HOOKS and not sys.stdin.isatty() else ""
    result = hooks.run_hook(name, args, stdin, cwd=Path.cwd(), env=os.environ)
    for line in hook_lines([a for a in result.actions if a.done or a.error is not None]):
        click.echo(f"gitsess: {line}", err=True)
    if result.error is not None:
        where = f" (details in {result.log})" if result.log else ""
        click.echo(f"gitsess: the {name} hook failed: {result.error}{where}", err=True)
