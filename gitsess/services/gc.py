"""Cleaning up after git and after crashes: the sweeps behind the git hooks and `gitsess gc`.

Each sweep looks at how things stand now (the registry, git's refs and worktrees, the mounts),
does what that calls for and returns an `Action` for each thing it did; with `dry_run` it
changes nothing and returns what it would do. No sweep relies on having seen a git event, so
running one late, twice, or after a hook was missed is safe: the hooks run the ones an event
calls for (`gitsess.services.hooks`), `gitsess gc` runs them all in the order of `SWEEPS`,
then the other packages' (`gc_cmds.SWEEPS`: orphaned agent roots). A session one sweep removes
is not reported again by a later one.

Nothing unapplied is lost: sessions are removed through `sessions.remove`, which archives their
unapplied changes first; when the worktree is gone, `archives.archive_without_worktree` does it.
A session dir no row owns is deleted only if it holds nothing (`repair.holds_changes`); one that
does is made a session again by `doctor --repair`.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Protocol

from gitsess.errors import GitsessError
from gitsess.git import tracking
from gitsess.git.archive_commits import delete_archive, list_archives
from gitsess.git.changes import compute_changes
from gitsess.git.repo import GitError, RepoContext, Repository, config_value
from gitsess.overlay import control, layout, mounttable, objectdir
from gitsess.runtime import mount, strays
from gitsess.services import (
    apply_journal,
    archives,
    checkpoints,
    live,
    real_tree,
    repair,
    sessions,
)
from gitsess.services.handle import SessionHandle
from gitsess.store.registry import Registry, Session

MAX_AGE_KEY = "gitsess.gc.archiveMaxAge"
DEFAULT_MAX_AGE = timedelta(days=30)
LOCK = "gc.lock"


@dataclass(frozen=True)
class Action:
    """One thing a sweep did (or, in a dry run or when it failed, did not do)."""

    sweep: str  # the sweep that found it, e.g. "merged"
    what: str  # "session", "mount", "session dir" or "archive"
    name: str  # the session's name, the directory, or the ref
    # remove, unmount, delete, mark-merged, mark-detached, mark-active, rebind, drop, move-base
    verb: str
    reason: str
    done: bool = False
    error: str | None = None
    notes: tuple[str, ...] = ()


class Sweep(Protocol):
    def __call__(self, ctx: RepoContext, *, dry_run: bool = False) -> list[Action]: ...


# ---------------------------------------------------------------------------------------------
# registry access


def _registry(ctx: RepoContext) -> AbstractContextManager[Registry | None]:
    return Registry.opened(ctx.registry_path, create=False)


def _sessions(ctx: RepoContext) -> list[Session]:
    with _registry(ctx) as registry:
        return [] if registry is None else registry.all()


def sessions_by_id(ctx: RepoContext, ids: Collection[str]) -> list[Session]:
    return [s for s in _sessions(ctx) if s.id in ids]


def _update(ctx: RepoContext, session: Session, **values: object) -> None:
    with _registry(ctx) as registry:
        if registry is not None and registry.by_id(session.id) is not None:
            registry.update(session.id, **values)


@contextmanager
def exclusive(ctx: RepoContext) -> Iterator[None]:
    """One cleanup at a time (hooks of concurrent git commands, `gc`): two of them would remove
    the same session, and the second would fail."""
    fd = os.open(ctx.state_dir / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _attempt(action: Action, dry_run: bool, work: Callable[[], object]) -> Action:
    """Do `work` for `action` unless this is a dry run; a failure is reported, not raised, so
    one session in trouble does not stop the sweep for the others."""
    if dry_run:
        return action
    try:
        work()
    except (GitsessError, OSError, GitError) as e:
        return replace(action, error=str(e))
    return replace(action, done=True)


# ---------------------------------------------------------------------------------------------
# removing a session, and what it had not applied


def _retire(ctx: RepoContext, session: Session, sweep: str, reason: str, dry_run: bool) -> Action:
    """Remove a session (stopped, archived when it holds unapplied changes, then removed with
    the worktree, branch and agent homes gitsess made for it)."""
    action = Action(sweep, "session", session.name, "remove", reason)
    if dry_run:
        return action
    try:
        notes = [] if session.worktree.is_dir() else archives.archive_without_worktree(ctx, session)
        removal = sessions.remove(ctx, session.id)
    except (GitsessError, OSError, GitError) as e:
        return replace(action, error=str(e))
    return replace(action, done=True, notes=(*notes, *removal.notes))


def unapplied(ctx: RepoContext, session: Session) -> int:
    """How many changes of the session apply would carry (and `rm` would archive)."""
    if not SessionHandle(ctx, session).delta.exists():
        return 0
    root = real_tree.real_root(session)
    with SessionHandle(ctx, session).view(root) as view:
        return len(compute_changes(view, real_tree.open_real(session, root)).git_changes())


# ---------------------------------------------------------------------------------------------
# the sweeps


def sweep_interrupted_applies(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Applies killed half-way: completed (with what they left written aside removed) before
    any sweep looks at the session's files."""
    actions = []
    for s in _sessions(ctx):
        if sessions.apply_interrupted(ctx, s):
            action = Action("interrupted", "session", s.name, "complete", "an apply was killed")
            actions.append(_attempt(action, dry_run, partial(apply_journal.reconcile, ctx, s)))
    return actions


def sweep_stale_mounts(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Mounts left behind by a daemon that died (kill -9, crash): unmounted."""
    actions = []
    for s in _sessions(ctx):
        mountpoint = ctx.session_dir(s.id) / layout.MOUNTPOINT
        # (no daemon holds the session: asked of its lock, as a stuck one answers nothing)
        if not control.serving(str(ctx.session_dir(s.id))) and mounttable.is_mount_point(
            mountpoint
        ):
            action = Action(
                "stale-mount", "mount", str(mountpoint), "unmount", "its daemon is gone"
            )
            actions.append(_attempt(action, dry_run, partial(mount.clean_stale, mountpoint)))
    return actions


def sweep_gone_worktrees(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Sessions whose worktree was removed (`git worktree remove`, or deleted and prunable):
    archived and removed."""
    repo = ctx.open()
    return [
        _retire(ctx, s, "worktree-gone", f"its worktree {s.worktree} was removed", dry_run)
        for s in _sessions(ctx)
        if tracking.worktree_gone(repo, s.worktree)
    ]


def sweep_gone_branches(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Sessions whose branch was deleted: archived and removed. A branch that was renamed is
    followed instead."""
    if tracking.rename_in_progress(ctx.common_dir):
        return []  # the old name is gone and the new one not written yet: look again later
    repo = ctx.open()
    actions = []
    for s in _sessions(ctx):
        # Sessions without their worktree are the other sweep's: it knows a missing one from
        # one that is away for now.
        if s.branch is None or not s.worktree.is_dir() or not tracking.branch_gone(repo, s.branch):
            continue
        new = tracking.renamed_to(repo, s.branch)
        if new is not None:
            action = Action(
                "branch-gone", "session", s.name, "rebind", f"branch {s.branch} is now {new}"
            )
            actions.append(_attempt(action, dry_run, partial(_update, ctx, s, branch=new)))
        else:
            reason = f"branch {s.branch} was deleted"
            actions.append(_retire(ctx, s, "branch-gone", reason, dry_run))
    return actions


def renaming(ctx: RepoContext) -> list[Session]:
    """Sessions whose branch has no ref while their worktree's HEAD still names it: git is
    renaming it (`branch -m` deletes the old ref before it writes the new one and moves HEAD;
    git deletes no branch a worktree has checked out). With reflogs off nothing else says so."""
    repo = ctx.open()
    found = []
    for s in _sessions(ctx):
        if s.branch is None or not s.worktree.is_dir() or tracking.tip_id(repo, s.branch):
            continue
        try:
            if tracking.checked_out(s.worktree).branch == s.branch:
                found.append(s)
        except GitsessError:
            continue
    return found


def follow_heads(
    ctx: RepoContext, renamed: list[Session], *, dry_run: bool = False
) -> list[Action]:
    """`renaming` sessions once the rename is done: bound to the branch their worktree's HEAD
    names now."""
    repo = ctx.open()
    actions = []
    for s in renamed:
        try:
            new = tracking.checked_out(s.worktree).branch
        except GitsessError:
            continue
        if new is None or new == s.branch or tracking.tip_id(repo, new) is None:
            continue
        action = Action(
            "branch-gone", "session", s.name, "rebind", f"branch {s.branch} is now {new}"
        )
        actions.append(_attempt(action, dry_run, partial(_update, ctx, s, branch=new)))
    return actions


def sweep_merged(
    ctx: RepoContext,
    *,
    dry_run: bool = False,
    into: Collection[str] | None = None,
    before: str | None = None,
) -> list[Action]:
    """Sessions whose branch was merged: removed when they hold nothing unapplied, else marked
    merged (which only `ls` shows: such a session still runs and applies as before).

    `into` are the branches merged into (default: the default branches, see
    `tracking.default_branches`); `before` is the tip of the one just merged into as it was
    before the merge (a branch it held already was not merged now). A branch counts as merged
    when a target reaches its tip and it carries work done since the session began: its tip
    moved from the session's base, or was committed after the session was created; a branch
    just made from main, with nothing of its own, is not "merged" into main. A default branch is
    never merged into anything: its sessions follow the main line.
    """
    repo = ctx.open()
    defaults = tracking.default_branches(repo)
    targets = sorted(defaults) if into is None else list(into)
    actions = []
    for s in _sessions(ctx):
        if s.branch is None or s.branch in defaults or not s.worktree.is_dir():
            continue
        target = next((t for t in targets if t != s.branch and _merged(repo, s, t, before)), None)
        if target is None:
            continue
        reason = f"branch {s.branch} was merged into {target}"
        try:
            count = unapplied(ctx, s)
        except (GitsessError, OSError, GitError) as e:
            actions.append(Action("merged", "session", s.name, "mark-merged", reason, error=str(e)))
            continue
        if count == 0:
            actions.append(_retire(ctx, s, "merged", reason, dry_run))
        elif s.state != "merged":
            reason += f"; it holds {count} unapplied change(s)"
            action = Action("merged", "session", s.name, "mark-merged", reason)
            actions.append(_attempt(action, dry_run, partial(_update, ctx, s, state="merged")))
    return actions


def _merged(repo: Repository, session: Session, target: str, before: str | None) -> bool:
    assert session.branch is not None
    return tracking.merged_into(
        repo, session.branch, target, before, session.base_commit, session.created_at.timestamp()
    )


def sweep_detached(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Sessions whose worktree switched to another branch (or detached its HEAD): marked
    detached, and active again once the worktree is back on their branch. `run` refuses a
    detached session unless told to `--rebind` it (`sessions.check_bound`)."""
    actions = []
    for s in _sessions(ctx):
        if s.branch is None or s.state not in ("active", "detached") or not s.worktree.is_dir():
            continue
        try:
            head = tracking.checked_out(s.worktree)
        except GitsessError:
            continue  # not a usable worktree now; the worktree sweep decides about it
        on_branch = head.branch == s.branch
        if s.state == "active" and not on_branch:
            now = f"branch {head.branch}" if head.branch else "a detached HEAD"
            reason = f"its worktree has {now} checked out, not {s.branch}"
            state, verb = "detached", "mark-detached"
        elif s.state == "detached" and on_branch:
            state, verb, reason = "active", "mark-active", f"its worktree is back on {s.branch}"
        else:
            continue
        action = Action("detached", "session", s.name, verb, reason)
        actions.append(_attempt(action, dry_run, partial(_update, ctx, s, state=state)))
    return actions


def sweep_committed(
    ctx: RepoContext, *, dry_run: bool = False, branch: str | None = None
) -> list[Action]:
    """Changes that a commit on the session's branch took: the session's view, the real
    worktree and the branch's commit agree on them, so they leave the delta (which then follows
    the worktree there again). Only sessions on `branch` when it is given.

    A commit made inside a session leaves the real worktree behind the branch; the session's
    changes then still differ from the worktree and stay: dropping them would change the view.
    """
    actions = []
    for s in _sessions(ctx):
        if s.branch is None or (branch is not None and s.branch != branch):
            continue
        if not s.worktree.is_dir() or not SessionHandle(ctx, s).delta.exists():
            continue
        try:
            head = tracking.checked_out(s.worktree)
            if head.branch != s.branch or head.commit is None:
                continue
            root = real_tree.real_root(s)
            repo = real_tree.open_real(s, root)
            with SessionHandle(ctx, s).view(root) as view:
                settled = tracking.settled_paths(view, repo, head.commit)
        except (GitsessError, OSError, GitError) as e:
            actions.append(Action("committed", "session", s.name, "drop", str(e), error=str(e)))
            continue
        if not settled:
            continue
        paths = [p.path for p in settled]
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        reason = f"the commit on {s.branch} has them as the session does: {shown}"
        action = Action("committed", "session", s.name, "drop", reason)
        actions.append(_attempt(action, dry_run, partial(_drop, ctx, s, root, settled)))
    return actions


def _drop(ctx: RepoContext, session: Session, root: Path, settled: list[tracking.Settled]) -> None:
    # A path the session wrote to since it was found settled keeps the new write.
    with SessionHandle(ctx, session).view(root) as view:
        still = [p.path for p in settled if tracking.stamps_of(view, p.path) == p.stamps]
    live.drop_paths(ctx, replace(session, worktree=root), still)


def follow_rewrites(
    ctx: RepoContext, rewrites: Mapping[str, str], *, dry_run: bool = False
) -> list[Action]:
    """Sessions whose base commit was rewritten (amend, rebase) take the rewritten commit as
    their base: the old one is on no branch any more and git will prune it."""
    actions = []
    for s in _sessions(ctx):
        new = rewrites.get(s.base_commit) if s.base_commit else None
        if new is None:
            continue
        assert s.base_commit is not None
        reason = f"its base {s.base_commit[:10]} was rewritten as {new[:10]}"
        action = Action("rewritten", "session", s.name, "move-base", reason)
        actions.append(_attempt(action, dry_run, partial(_update, ctx, s, base_commit=new)))
    return actions


def sweep_orphan_dirs(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Session directories that no session owns (a crash between removing the row and the
    directory, a registry restored from a backup): their daemon stopped, then deleted."""
    if not ctx.sessions_dir.is_dir():
        return []
    known = {s.id for s in _sessions(ctx)}
    actions = []
    for directory in sorted(ctx.sessions_dir.iterdir()):
        if directory.name in known or not repair.is_session_id(directory.name):
            continue
        if directory.is_symlink():
            # Not a session dir, whatever it points to: the link goes, never what it names.
            link = Action("orphan-dir", "link", str(directory), "delete", "no session owns it")
            actions.append(_attempt(link, dry_run, partial(os.unlink, directory)))
            continue
        if not directory.is_dir():
            continue
        action = Action("orphan-dir", "session dir", str(directory), "delete", "no session owns it")
        if repair.holds_changes(directory):
            # No row says whose changes these are (a lost or damaged registry): never deleted.
            actions.append(
                replace(action, error="it holds changes; `gitsess doctor --repair` recovers it")
            )
            continue
        status = mount.status(directory)
        if status is not None and status.participants:
            pids = ", ".join(str(p.get("pid")) for p in status.participants)
            actions.append(replace(action, error=f"its view is in use (pid {pids})"))
            continue
        actions.append(_attempt(action, dry_run, partial(_delete_orphan, ctx, directory)))
    return actions


def _delete_orphan(ctx: RepoContext, directory: Path) -> None:
    status = mount.status(directory)
    mount.stop(directory, Path(status.mountpoint) if status else directory / layout.MOUNTPOINT)
    if mounttable.is_mount_point(directory / layout.MOUNTPOINT):
        # deleting through a live view would delete the view's files, not the directory
        raise GitsessError(f"{directory / 'mnt'} is still mounted")
    with _registry(ctx) as registry:
        if registry is None:
            objectdir.remove_session_dir(directory)
            return
        # Under the registry's write lock: a session being created makes its row and its
        # directory in one transaction, so a directory without a row here is not a new one.
        with registry.write():
            if registry.by_id(directory.name) is None:
                objectdir.remove_session_dir(directory)


def archive_max_age(repo: Repository) -> timedelta | None:
    """`gitsess.gc.archiveMaxAge` (default 30 days): "30 days", "2.weeks", "12h", a bare number
    of days, "now", or "never" (None: archives are kept)."""
    value = config_value(repo, MAX_AGE_KEY)
    return DEFAULT_MAX_AGE if value is None else parse_age(value)


_AGE = re.compile(r"(\d+)\s*[._ ]?\s*([a-z]*)")
_UNITS = {
    "": timedelta(days=1),
    "s": timedelta(seconds=1),
    "sec": timedelta(seconds=1),
    "second": timedelta(seconds=1),
    "min": timedelta(minutes=1),
    "minute": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "hour": timedelta(hours=1),
    "d": timedelta(days=1),
    "day": timedelta(days=1),
    "w": timedelta(weeks=1),
    "week": timedelta(weeks=1),
    "month": timedelta(days=30),
    "y": timedelta(days=365),
    "year": timedelta(days=365),
}


def parse_age(value: str) -> timedelta | None:
    text = value.strip().lower()
    if text in ("never", "false", "off"):
        return None
    if text == "now":
        return timedelta(0)
    text = text.removesuffix("ago").rstrip(". ")
    match = _AGE.fullmatch(text)
    unit = match.group(2) if match else ""
    if match and unit not in _UNITS and unit.endswith("s"):
        unit = unit[:-1]
    if match is None or unit not in _UNITS:
        raise GitsessError(
            f"{MAX_AGE_KEY} = {value!r}: give an age such as '30 days', '2.weeks' or 'never'"
        )
    return int(match.group(1)) * _UNITS[unit]


def sweep_old_archives(
    ctx: RepoContext, *, dry_run: bool = False, now: datetime | None = None
) -> list[Action]:
    """Archive refs older than `gitsess.gc.archiveMaxAge`: deleted (git's own gc then prunes
    their commits once nothing else reaches them)."""
    repo = ctx.open()
    max_age = archive_max_age(repo)
    if max_age is None:
        return []
    now = now or datetime.now(UTC)
    actions = []
    for info in list_archives(repo):
        age = now - info.archived_at
        if age > max_age:
            reason = f"archived {age.days} day(s) ago, more than {MAX_AGE_KEY} allows"
            action = Action("old-archive", "archive", info.ref, "delete", reason)
            actions.append(_attempt(action, dry_run, partial(delete_archive, repo, info)))
    return actions


def _setting(repo: Repository, key: str, default: str) -> str:
    value = config_value(repo, key)
    return default if value is None else value


def retention(repo: Repository) -> checkpoints.Retention:
    """The history a session keeps: `gitsess.checkpoints.keep` (default 200) and `.maxAge`
    (30 days), `gitsess.log.maxEvents` (200,000) and `.maxAge` (30 days)."""
    counts = {}
    for key, default in (
        ("gitsess.checkpoints.keep", checkpoints.KEEP),
        ("gitsess.log.maxEvents", checkpoints.LOG_EVENTS),
    ):
        value = _setting(repo, key, str(default))
        if not value.isdigit():
            raise GitsessError(f"{key} = {value!r}: give a count such as {default}")
        counts[key] = int(value)
    ages = {}
    for key in ("gitsess.checkpoints.maxAge", "gitsess.log.maxAge"):
        value = _setting(repo, key, f"{checkpoints.MAX_AGE_DAYS} days")
        try:
            ages[key] = parse_age(value)
        except GitsessError:
            raise GitsessError(f"{key} = {value!r}: give an age such as '30 days'") from None
    return checkpoints.Retention(
        counts["gitsess.checkpoints.keep"],
        ages["gitsess.checkpoints.maxAge"],
        counts["gitsess.log.maxEvents"],
        ages["gitsess.log.maxAge"],
    )


def sweep_history(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Checkpoints and audit log events past their retention (a mounted session's through
    its daemon)."""
    if dry_run:
        return []
    keep = retention(ctx.open())
    actions = []
    for session in _sessions(ctx):
        try:
            done = checkpoints.trim(ctx, session, keep)
        except (GitsessError, OSError) as e:
            actions.append(Action("history", "session", session.name, "trim", "", error=str(e)))
            continue
        if done is not None and (done.checkpoints or done.events):
            reason = f"{done.checkpoints} checkpoint(s), {done.events} log event(s) past retention"
            actions.append(Action("history", "session", session.name, "trim", reason, done=True))
    return actions


def sweep_stray_daemons(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Daemons of this repository's sessions whose view is gone: they save what they can and
    exit (see runtime/strays.py). Those of other repositories are theirs to end (`gitsess ps`
    lists every one of the user's). Before the mounts: what a killed one leaves is stale."""
    actions = []
    ours = os.path.realpath(ctx.sessions_dir)
    for stray in strays.find():
        if os.path.dirname(os.path.dirname(os.path.realpath(stray.delta))) != ours:
            continue
        name = f"{stray.pid} (session {stray.session_id})"
        action = Action("stray-daemon", "daemon", name, "end", stray.reason)
        actions.append(_attempt(action, dry_run, partial(strays.end, stray)))
    return actions


# In the order `gc` runs them: sessions whose worktree or branch is gone go before the sweeps
# that look at the branch a worktree has checked out.
SWEEPS: tuple[Sweep, ...] = (
    # first: an archive the sweeps below make survives the run that made it, whatever the
    # maximum age, and a dry run lists what the run does
    sweep_old_archives,
    sweep_stray_daemons,
    sweep_interrupted_applies,
    sweep_stale_mounts,
    sweep_gone_worktrees,
    sweep_gone_branches,
    sweep_merged,
    sweep_detached,
    sweep_committed,
    sweep_orphan_dirs,
    sweep_history,
)


def collect(ctx: RepoContext, *, dry_run: bool = False) -> list[Action]:
    """Every sweep, in order. Without a state dir there is nothing but archives to look at, and
    nothing is created (not even the lock)."""
    if dry_run or not ctx.state_dir.is_dir():
        return _run_all(ctx, dry_run)
    with exclusive(ctx):
        return _run_all(ctx, dry_run)


def _run_all(ctx: RepoContext, dry_run: bool) -> list[Action]:
    actions = []
    removed: set[str] = set()
    for sweep in SWEEPS:
        for action in sweep(ctx, dry_run=dry_run):
            # A session one sweep removes (or in a dry run would remove, or failed to) is still
            # in the registry for the later ones: they have nothing more to say about it.
            if action.what == "session" and action.name in removed:
                continue
            actions.append(action)
            if action.what == "session" and action.verb == "remove":
                removed.add(action.name)
    return actions
