"""Git hooks: the scripts, their install and uninstall, and what gitsess does when one runs.

The scripts are small POSIX shell: they run on every ref update of every repository that uses
the hooks directory, so they find out whether the repository has sessions by testing for the
registry file, without starting git or Python. Only then do they run `gitsess hook NAME ARGS`.
A hook that was installed before gitsess's is kept beside it (`NAME.gitsess-user`) and runs
first, with the same arguments and input; its exit status is the hook's. gitsess's own part
never fails the git command: `run_hook` logs its errors to `<state>/hooks.log`.

What each hook does is a choice of sweeps from `gitsess.services.gc`; they look at how things
stand, so a missed hook (installed late, a libgit2 tool that runs none) is caught up by the next
one, or by `gitsess gc`. Every hook that reaches Python runs `worktree-gone`, `branch-gone` and
`detached`; post-merge adds `merged` into the current branch (not for a squash merge, which
commits nothing yet) and `committed`; post-commit adds `committed` for the current branch;
post-rewrite moves the bases it rewrote (`rewritten`), then `committed`. `run_hook` holds
`gc.lock` (two hooks of concurrent git commands must not both remove a session), and does
nothing for git in another repository run from inside a session (it still has `$GITSESS_DIR`).
Hooks are synchronous: the notes appear under the git command that caused them, and `gitsess
ls` right after `git branch -D` is right.

Only what can matter reaches Python: reference-transaction only when committed, for a deleted
branch whose name appears in `sessions.db` or its WAL; post-commit not during a rebase;
post-checkout not for a file checkout; nothing inside a session (`GITSESS_SESSION_ID`: git
there changes only the session's own `.git`). The scripts are `render(name, command)`; the
files in the top-level `hooks/` are that with `command = gitsess`, and install writes the
installing interpreter's absolute command, into `core.hooksPath` or `<common-dir>/hooks`.
Under pre-commit the scripts rebuild git's arguments from `PRE_COMMIT_*` variables.
A rename in progress (`git branch -m` runs no hook for the new name) is followed by a detached
`gitsess hook reference-transaction --follow-rename`, which waits for it to finish.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gitsess import durable
from gitsess.errors import GitsessError
from gitsess.git import tracking
from gitsess.git.repo import (
    RepoContext,
    Repository,
    common_dir,
    config_value,
    discover,
    git_dir,
    open_worktree,
)
from gitsess.services import gc

HOOKS = ("post-checkout", "post-commit", "post-merge", "post-rewrite", "reference-transaction")
STDIN_HOOKS = frozenset({"post-rewrite", "reference-transaction"})
USER_SUFFIX = ".gitsess-user"
MARKER = "# gitsess-hook "
LOG = "hooks.log"
LOG_LIMIT = 1 << 20  # bytes; the log is then moved to hooks.log.1 and starts again

_PRE_COMMIT_ARGS = {
    "post-checkout": '"$PRE_COMMIT_FROM_REF" "$PRE_COMMIT_TO_REF" "$PRE_COMMIT_CHECKOUT_TYPE"',
    "post-merge": '"$PRE_COMMIT_IS_SQUASH_MERGE"',
    "post-rewrite": '"$PRE_COMMIT_REWRITE_COMMAND"',
}

_HEADER = """\
#!/bin/sh
{marker}{name}
# Tells gitsess what git just did, so that sessions follow their branches and worktrees.
# `gitsess hooks install` wrote this file; `gitsess hooks uninstall` takes it out again.
# A hook that was here before is kept beside this one, its name ending in {suffix}, and
# runs first, with the same arguments and input; its exit status is this hook's. gitsess itself
# never fails the git command: its errors go to hooks.log in the gitsess state dir.

run_gitsess() {{
    if command -v {program} >/dev/null 2>&1; then
        {command} "$@"
        return
    fi
    # One line per git command (its hooks share the parent), not a "not found" per hook.
    [ "$(cat "$state/hooks.missing" 2>/dev/null)" = "$PPID" ] && return
    echo "$PPID" >"$state/hooks.missing" 2>/dev/null
    echo "gitsess: the git hooks cannot run {program} (not found), so sessions do not follow" \\
        "branches and worktrees now; put gitsess on PATH or run 'gitsess hooks install'" \\
        "again, then 'gitsess gc' catches up" >&2
}}

user_hook="$0{suffix}"
status=0
"""

_PRE_COMMIT = """
# The pre-commit framework passes git's arguments in its environment instead.
if [ $# -eq 0 ] && [ -n "$PRE_COMMIT" ]; then
    set -- {args}
fi
"""

_FIND_STATE = """
# Where gitsess keeps this repository's sessions, found without starting git or Python: this
# runs on every ref update, and must cost nothing in a repository without sessions.
git_dir=${GIT_DIR:-.git}
if [ -f "$git_dir" ]; then
    read -r _ git_dir <"$git_dir"  # a linked worktree's .git file: "gitdir: PATH"
fi
common=$GIT_COMMON_DIR
if [ -z "$common" ]; then
    common=$git_dir
    if [ -f "$git_dir/commondir" ]; then
        read -r common <"$git_dir/commondir"
        case $common in /*) ;; *) common=$git_dir/$common ;; esac
    fi
fi
if [ ! -f "$common/HEAD" ]; then
    # not a layout this script knows (a bare repository, say): ask git
    common=$(git rev-parse --git-common-dir 2>/dev/null) || common=
fi
state=${GITSESS_DIR:-$common/gitsess}
if [ ! -f "$state/sessions.db" ]; then
    if [ -x "$user_hook" ]; then
        exec "$user_hook" "$@"
    fi
    exit 0
fi
"""

_USER_WITH_INPUT = """
input=
if [ -z "$PRE_COMMIT" ]; then
    input=$(cat; echo .)  # the dot keeps trailing newlines, which $(...) would strip
    input=${input%.}
fi
if [ -x "$user_hook" ]; then
    printf '%s' "$input" | "$user_hook" "$@"
    status=$?
fi
"""

_USER = """
if [ -x "$user_hook" ]; then
    "$user_hook" "$@"
    status=$?
fi
"""

_INSIDE = """
# git inside a session (run sets GITSESS_SESSION_ID) changes only the session's own .git: no
# branch or worktree the sweeps look at moved, so no Python needs to start.
[ -z "$GITSESS_SESSION_ID" ] || exit $status
"""

_FILTERS = {
    "reference-transaction": """
# Of all ref updates, only a deleted branch concerns sessions, once the deletion is done, and
# only one whose name is in the registry (the file holds its text as is; recent rows may still
# be in the write-ahead log).
[ "$1" = committed ] || exit $status
z40=0000000000000000000000000000000000000000  # a deleted ref's new value (SHA-1)
z64=${z40}000000000000000000000000  # (SHA-256)
wanted=
while read -r _ new ref; do
    case $new in "$z40" | "$z64") ;; *) continue ;; esac
    case $ref in refs/heads/*) ;; *) continue ;; esac
    if grep -qsF -e "${ref#refs/heads/}" "$state/sessions.db" "$state/sessions.db-wal"; then
        wanted=1
    fi
done <<EOF
$input
EOF
[ -n "$wanted" ] || exit $status
""",
    "post-commit": """
# Rebasing commits one by one: the post-rewrite hook at the end does the work once.
if [ -d "$git_dir/rebase-merge" ] || [ -d "$git_dir/rebase-apply" ]; then
    exit $status
fi
""",
    "post-checkout": """
# A checkout of files (flag 0) leaves the branch as it was.
[ "$3" = 0 ] && exit $status
""",
}

_RUN_WITH_INPUT = """
export GITSESS_DIR="$state"
printf '%s' "$input" | run_gitsess hook {name} "$@"
exit $status
"""

_RUN = """
export GITSESS_DIR="$state"
run_gitsess hook {name} "$@" </dev/null
exit $status
"""


def render(name: str, command: Sequence[str]) -> str:
    """The hook script `name`, starting gitsess with `command`."""
    if name not in HOOKS:
        raise GitsessError(f"gitsess has no {name} hook; it has {', '.join(HOOKS)}")
    text = _HEADER.format(
        marker=MARKER,
        name=name,
        suffix=USER_SUFFIX,
        command=" ".join(shlex.quote(word) for word in command),
        program=shlex.quote(command[0]),
    )
    if name in _PRE_COMMIT_ARGS:
        text += _PRE_COMMIT.format(args=_PRE_COMMIT_ARGS[name])
    text += _FIND_STATE
    text += _USER_WITH_INPUT if name in STDIN_HOOKS else _USER
    text += _INSIDE
    text += _FILTERS.get(name, "")
    text += (_RUN_WITH_INPUT if name in STDIN_HOOKS else _RUN).format(name=name)
    return text


def default_command() -> list[str]:
    """This very gitsess: the interpreter running it, by absolute path, so hooks find it
    whatever PATH git runs them with (an IDE, a virtualenv that is not activated)."""
    return [sys.executable, "-P", "-m", "gitsess"]


# ---------------------------------------------------------------------------------------------
# install, uninstall


@dataclass(frozen=True)
class HookFile:
    name: str
    path: Path
    # installed, updated, unchanged (install); removed, absent, not-ours (uninstall)
    outcome: str
    user_hook: Path | None = None  # the user's hook kept beside it (or, on uninstall, put back)


@dataclass(frozen=True)
class HooksReport:
    hooks_dir: Path
    hooks: list[HookFile]
    notes: list[str]


def hooks_dir(ctx: RepoContext) -> Path:
    """Where git looks for this repository's hooks: `core.hooksPath` (a relative one is taken
    from the worktree the hooks run in, as git does), else the common dir's `hooks`, which all
    worktrees share."""
    repo = open_worktree(ctx.worktree) if ctx.worktree is not None else ctx.open()
    configured = config_value(repo, "core.hooksPath")
    if configured is None:
        return ctx.common_dir / "hooks"
    path = Path(configured).expanduser()
    base = ctx.worktree if ctx.worktree is not None else git_dir(repo)
    return path if path.is_absolute() else base / path


def _ours(path: Path) -> bool:
    if path.is_symlink() or not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(256)
    return MARKER.encode() in head


def install(ctx: RepoContext, command: Sequence[str]) -> HooksReport:
    """Install every hook. A user's hook is kept as `NAME.gitsess-user` and called first; a
    gitsess hook already there is brought up to date. Changes nothing when any hook cannot be
    installed."""
    directory = hooks_dir(ctx)
    blocked = [
        name
        for name in HOOKS
        if os.path.lexists(directory / name)
        and not _ours(directory / name)
        and os.path.lexists(directory / (name + USER_SUFFIX))
    ]
    if blocked:
        raise GitsessError(
            f"{directory} holds both a hook and a kept {USER_SUFFIX} hook for "
            f"{', '.join(blocked)}; move one of them away, then install again"
        )
    for name in HOOKS:
        if (directory / name).is_dir():
            raise GitsessError(f"{directory / name} is a directory, not a hook")
    directory.mkdir(parents=True, exist_ok=True)
    hooks = []
    for name in HOOKS:
        path = directory / name
        kept = directory / (name + USER_SUFFIX)
        text = render(name, command)
        if _ours(path):
            outcome = "unchanged" if path.read_text() == text else "updated"
        else:
            outcome = "installed"
            if os.path.lexists(path):
                os.rename(path, kept)
        if outcome != "unchanged":
            _write_executable(path, text)
        hooks.append(HookFile(name, path, outcome, kept if os.path.lexists(kept) else None))
    notes = []
    inside = ctx.worktree is not None and directory.is_relative_to(ctx.worktree)
    if inside and not directory.resolve().is_relative_to(ctx.common_dir):
        notes.append(
            f"{directory} is inside the worktree {ctx.worktree}: other worktrees do not run "
            "these hooks, and if the directory is tracked, git status shows the change"
        )
    return HooksReport(directory, hooks, notes)


def _write_executable(path: Path, text: str) -> None:
    # a git running meanwhile never sees half a hook
    with durable.write_aside(path, 0o755) as f:
        f.write(text.encode())


def uninstall(ctx: RepoContext) -> HooksReport:
    """Remove gitsess's hooks and put back the user's hooks they kept."""
    directory = hooks_dir(ctx)
    hooks = []
    notes = []
    for name in HOOKS:
        path = directory / name
        kept = directory / (name + USER_SUFFIX)
        if _ours(path):
            path.unlink()
            outcome = "removed"
        elif os.path.lexists(path):
            outcome = "not-ours"
            if os.path.lexists(kept):
                notes.append(f"{path} is not gitsess's; {kept} is left as it is")
            hooks.append(HookFile(name, path, outcome))
            continue
        else:
            outcome = "absent"
        restored = None
        if os.path.lexists(kept):
            os.rename(kept, path)
            restored = path
        hooks.append(HookFile(name, path, outcome, restored))
    return HooksReport(directory, hooks, notes)


# ---------------------------------------------------------------------------------------------
# running a hook


@dataclass(frozen=True)
class HookRun:
    actions: list[gc.Action]
    error: str | None = None  # one line; the traceback is in the log
    log: Path | None = None


def run_hook(
    name: str, args: Sequence[str], stdin: str, *, cwd: Path, env: Mapping[str, str]
) -> HookRun:
    """Do what hook `name` calls for. Never raises: a git command must not fail because of
    gitsess. Actions and errors are logged to `<state>/hooks.log`."""
    if env.get("GITSESS_SESSION_ID"):
        # git inside a session changes the session's own `.git` only: the real branches and
        # worktrees the sweeps look at did not move (and `.git` here is the session's).
        return HookRun([], None)
    try:
        ctx = discover(cwd, env)
    except Exception as e:  # no state dir to log to: the message is all there is
        return HookRun([], f"{type(e).__name__}: {e}")
    log = ctx.state_dir / LOG
    if name == "reference-transaction" and args[:1] == (FOLLOW_RENAME,):
        return _follow_rename(ctx, log, args[1:])
    try:
        with gc.exclusive(ctx):
            actions = _dispatch(ctx, name, list(args), stdin, cwd)
        renaming = [s.id for s in gc.renaming(ctx)] if name == "reference-transaction" else []
        if renaming or (
            name == "reference-transaction" and tracking.rename_in_progress(ctx.common_dir)
        ):
            _follow_rename_later(cwd, env, renaming)
    except Exception as e:
        _log(log, name, args, [], traceback.format_exc())
        return HookRun([], f"{type(e).__name__}: {e}", log)
    if actions:
        _log(log, name, args, actions, None)
    return HookRun(actions, None, log)


# `git branch -m` deletes the old ref (the transaction this hook sees), then writes the new one
# with no hook at all: a process of its own waits for that and follows the rename at once.
FOLLOW_RENAME = "--follow-rename"
RENAME_WAIT = 10.0


def _follow_rename_later(cwd: Path, env: Mapping[str, str], renaming: Sequence[str]) -> None:
    """`renaming`: the sessions whose worktree's HEAD still names their deleted branch now,
    while the hook runs (`gc.renaming`): by the time this process looks, git has moved it."""
    subprocess.Popen(
        [*default_command(), "hook", "reference-transaction", FOLLOW_RENAME, *renaming],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # git must not wait for it
    )


def _follow_rename(ctx: RepoContext, log: Path, renaming: Sequence[str]) -> HookRun:
    deadline = time.monotonic() + RENAME_WAIT
    ids = set(renaming)  # with reflogs off, their worktrees' HEADs tell the new name
    while (
        tracking.rename_in_progress(ctx.common_dir) or any(s.id in ids for s in gc.renaming(ctx))
    ) and time.monotonic() < deadline:
        time.sleep(0.02)
    pending = gc.sessions_by_id(ctx, ids)
    try:
        with gc.exclusive(ctx):
            actions = gc.follow_heads(ctx, pending) + gc.sweep_gone_branches(ctx)
    except Exception as e:
        _log(log, "reference-transaction", [FOLLOW_RENAME], [], traceback.format_exc())
        return HookRun([], f"{type(e).__name__}: {e}", log)
    if actions:
        _log(log, "reference-transaction", [FOLLOW_RENAME], actions, None)
    return HookRun(actions, None, log)


def _dispatch(
    ctx: RepoContext, name: str, args: list[str], stdin: str, cwd: Path
) -> list[gc.Action]:
    try:
        here = open_worktree(cwd)
    except GitsessError:
        return []
    if common_dir(here) != ctx.common_dir:
        # git in another repository, run from inside a session of this one ($GITSESS_DIR)
        return []
    if name == "reference-transaction" and (
        args[:1] != ["committed"]
        or not any(u.deletes_branch for u in tracking.parse_ref_updates(stdin))
    ):
        return []
    actions = []
    if name == "post-rewrite":
        actions += gc.follow_rewrites(ctx, tracking.parse_rewrites(stdin))
    actions += gc.sweep_gone_worktrees(ctx)
    actions += gc.sweep_gone_branches(ctx)
    branch = tracking.checked_out(Path(here.workdir)).branch if here.workdir else None
    if name == "post-merge" and args[:1] != ["1"] and branch is not None:
        # A squash merge (flag 1) commits nothing yet; the commit that follows is a post-commit.
        actions += gc.sweep_merged(ctx, into=[branch], before=_orig_head(here))
    actions += gc.sweep_detached(ctx)
    if name in ("post-commit", "post-merge", "post-rewrite") and branch is not None:
        actions += gc.sweep_committed(ctx, branch=branch)
    return actions


def _orig_head(repo: Repository) -> str | None:
    """The tip before the merge: git saves it as ORIG_HEAD in the worktree's git dir."""
    try:
        return (git_dir(repo) / "ORIG_HEAD").read_text().strip() or None
    except OSError:
        return None


def _log(
    log: Path, name: str, args: Sequence[str], actions: list[gc.Action], error: str | None
) -> None:
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    lines = [f"{stamp} {name} {' '.join(args)}".rstrip()]
    for a in actions:
        state = "error: " + a.error if a.error else "done" if a.done else "not done"
        lines.append(f"  {a.sweep}: {a.verb} {a.what} {a.name}: {a.reason} ({state})")
        lines += [f"    {note}" for note in a.notes]
    if error is not None:
        lines += ["  " + line for line in error.rstrip().splitlines()]
    try:
        if log.exists() and log.stat().st_size > LOG_LIMIT:
            log.replace(log.with_name(LOG + ".1"))
        with open(log, "a") as f:
            f.write("\n".join(lines) + "\n")
    except OSError:
        pass  # a log that cannot be written must not turn into a failing hook
