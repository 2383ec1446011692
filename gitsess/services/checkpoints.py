"""Checkpoints, rewind and undo of a session (`overlay/history.py` keeps the states).

A mounted session is checkpointed and rewound by its daemon, between two requests of the
processes inside; one that is not, here, under the mount lock (no daemon starts meanwhile).
Inside a run (the state dir read-only, no mount lock to take) only the daemon does either.
Every `join` (each `gitsess run`) checkpoints first unless nothing changed since the newest
checkpoint, and an agent profile's turn hook runs `gitsess checkpoint --turn`.

`undo` right after a rewind or undo (the newest checkpoint is its "after" and nothing changed
since) rewinds to that operation's "before", so an undo is undone the same way, as jj's;
otherwise it rewinds to the newest checkpoint the session changed since. `rewind CP -- PATH...`
(`rewind_paths`) writes the paths that differ from the checkpoint through the view like any
writer's changes (`viewwrite`), between two checkpoints. A live rewind is refused while a
process holds a file it changes open for writing (found in /proc by the mount's device),
unless forced. `compare` diffs two checkpoints, or one and now, over the paths either touched.
"""

from __future__ import annotations

import difflib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from gitsess import processes
from gitsess.errors import GitsessError
from gitsess.git.pathspec import Pathspec
from gitsess.git.quoting import quote_path
from gitsess.git.repo import RepoContext
from gitsess.overlay import history, protocol, retention, usage
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.history import Checkpoint, Operation
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount
from gitsess.services import sealed
from gitsess.services.handle import SessionHandle
from gitsess.services.sessions import SESSION_ID_ENV
from gitsess.store.registry import Session

# Retention defaults (see `Retention`).
KEEP = 200
MAX_AGE_DAYS = 30
LOG_EVENTS = 200_000


@dataclass(frozen=True)
class Made:
    session: Session
    checkpoint: int | None  # None: nothing changed since the newest, which stands for it


@dataclass(frozen=True)
class Listing:
    session: Session
    checkpoints: list[Checkpoint]
    operations: list[Operation]
    changed_since_last: bool


@dataclass(frozen=True)
class Rewind:
    session: Session
    kind: str  # rewind or undo
    target: int  # the checkpoint whose state the session has now
    before: int  # the checkpoint keeping the state it replaced: `undo` goes back there
    operation: int
    live: bool


def _delta(ctx: RepoContext, session: Session) -> str:
    return str(SessionHandle(ctx, session).delta)


@contextmanager
def _offline(ctx: RepoContext, session: Session) -> Iterator[DeltaStore | None]:
    """The session's delta when no daemon serves it (held under the mount lock), else None."""
    session_dir = ctx.session_dir(session.id)
    if not session_dir.is_dir():
        raise GitsessError(f"session {session.name} has no session dir")
    with mount.locked(session_dir):
        if mount.status(ctx.session_dir(session.id)) is not None:
            yield None
            return
        store = DeltaStore(_delta(ctx, session))
        try:
            assert store.history is not None
            store.history.clear_unfinished()
            yield store
        finally:
            store.close()


def checkpoint(
    ctx: RepoContext,
    session: Session,
    message: str = "",
    *,
    kind: str = "manual",
    role: str | None = None,
) -> Made:
    """A checkpoint of the session as it is now, mounted or not. Inside a run (the state dir
    is read-only there) only its daemon can make it: an agent's hook makes one each turn."""
    if sealed.inside_run(ctx):
        made = _ask(ctx, session, "checkpoint", protocol.checkpoint, kind, message, None, role)
        if made is None:
            raise GitsessError(
                f"session {session.name} is not mounted, and inside a run only its daemon"
                " makes checkpoints"
            )
        return Made(session, made)
    for _ in range(ATTEMPTS):
        with _offline(ctx, session) as store:
            if store is not None:
                cp = store.mark(kind, message, None, role, always=True)
                return Made(session, None if cp is None else cp.id)
            made = _ask(ctx, session, "checkpoint", protocol.checkpoint, kind, message, None, role)
            if made is not None:
                return Made(session, made)
        mount.status(ctx.session_dir(session.id))  # (waits for a stopping daemon to be gone)
    raise _gone(session, "checkpoint")


# A daemon may stop (its last participant left) between "is it live" and the request: then the
# request is made again, to the next daemon or offline.
ATTEMPTS = 3
T = TypeVar("T")


def _ask(
    ctx: RepoContext, session: Session, what: str, op: Callable[..., T | None], *args: object
) -> T | None:
    """`op` of the live daemon; None when it was gone or stopping before it read the request."""
    try:
        return op(str(ctx.session_dir(session.id)), *args)
    except protocol.Refused as e:
        if e.stopping:
            return None
        if e.whole:
            raise GitsessError(str(e)) from None
        raise GitsessError(f"{what} of session {session.name}: {e}") from None
    except ConnectionError:
        return None


def _writers(ctx: RepoContext, session: Session) -> list[tuple[int, int, str]]:
    """The files of the live view some process holds open for writing."""
    try:
        status = protocol.status(str(ctx.session_dir(session.id)))
        if status is None:
            return []
        view = status.mountpoint
        if sealed.inside_run(ctx):
            # There the mount point is covered: the run's own view is at its worktree's path
            # (another session's view, covered too, no process of the run can hold).
            if os.environ.get(SESSION_ID_ENV) != session.id:
                return []
            view = str(session.worktree)
        return processes.writers_on(os.stat(view).st_dev)
    except (OSError, protocol.Refused):
        return []  # it is stopping: the request that follows finds out


def _gone(session: Session, what: str) -> GitsessError:
    return GitsessError(f"session {session.name} kept stopping during the {what}; retry")


def turn_message(hook_input: str) -> str:
    """A turn's checkpoint is named after its prompt's first line (an agent hook's JSON)."""
    try:
        prompt = json.loads(hook_input).get("prompt", "")
    except (ValueError, AttributeError):
        prompt = ""
    line = str(prompt).strip().split("\n", 1)[0]
    return line if len(line) <= 72 else line[:71] + "…"


def listing(ctx: RepoContext, session: Session) -> Listing:
    mount.sync(ctx.session_dir(session.id))
    delta = _delta(ctx, session)
    if not os.path.exists(delta):
        return Listing(session, [], [], False)
    store = DeltaStore(delta, readonly=True)
    try:
        cps = history.checkpoints(store.conn)
        ops = history.operations(store.conn)
        root = usage.cp_root(store.data_dir)
        changed = bool(cps) and history.changed_since(store.conn, root, cps[-1].id)
        return Listing(session, cps, ops, changed)
    finally:
        store.close()


def rewind(
    ctx: RepoContext, session: Session, target: int, *, kind: str = "rewind", force: bool = False
) -> Rewind:
    """The whole session back to checkpoint `target`; the state it replaces is kept as a
    checkpoint first, so `undo` brings it back. A live one is refused while a process holds a
    file it changes open for writing, unless `force`."""
    if session.read_only:
        raise GitsessError(f"session {session.name} is read-only")
    if sealed.inside_run(ctx):  # (no mount lock there: the state dir is read-only)
        done = _live_rewind(ctx, session, target, kind, force)
        if done is None:
            raise GitsessError(
                f"session {session.name} is not mounted, and inside a run only its daemon"
                " rewinds it"
            )
        return done
    for _ in range(ATTEMPTS):
        with _offline(ctx, session) as store:
            if store is not None:
                try:
                    rewound = store.rewind(target, kind)
                except KeyError:
                    raise history.no_such(target) from None
                op = rewound.operation
                return Rewind(session, kind, target, op.before, op.id, False)
            done = _live_rewind(ctx, session, target, kind, force)
            if done is not None:
                return done
        mount.status(ctx.session_dir(session.id))
    raise _gone(session, kind)


def _live_rewind(
    ctx: RepoContext, session: Session, target: int, kind: str, force: bool
) -> Rewind | None:
    """The rewind made by the live daemon; None when it was gone or stopping."""
    # The daemon tells the files the rewind changes from its committed history, which holds
    # a write of the last commit interval only once committed: without this, a file written
    # just before (on a loaded machine) passes for unchanged, and a writer holding it does
    # not stop the rewind.
    mount.sync(ctx.session_dir(session.id))
    writers = _writers(ctx, session)
    op_id = _ask(ctx, session, kind, protocol.rewind, target, kind, writers, force)
    if op_id is None:
        return None
    found = _operation(ctx, session, op_id)
    return Rewind(session, kind, target, found.before, found.id, True)


def rewind_paths(
    ctx: RepoContext, session: Session, target: int, pathspecs: Sequence[str]
) -> Rewind:
    """Only these paths back to checkpoint `target` (files, symlinks, deletions), written
    into the view as any writer's changes; the state before is a checkpoint, so `undo`
    brings it back."""
    from gitsess.services.real_tree import real_root
    from gitsess.services.viewwrite import view_writer

    if session.read_only:
        raise GitsessError(f"session {session.name} is read-only")
    changes = compare(ctx, session, target, None, pathspecs)
    before = checkpoint(ctx, session, f"before rewind of paths to {target}", kind="rewind")
    with (
        SessionHandle(ctx, session).view(at=target) as old,
        view_writer(ctx, session, real_root(session)) as writer,
    ):
        for change in changes:
            entry = old.entry(change.path)
            if entry is None:
                writer.remove(change.path)
            elif entry.kind == "symlink":
                writer.put_symlink(change.path, os.fsencode(old.readlink(change.path)))
            else:
                writer.put_file(change.path, (old.read(change.path),), entry.mode & 0o7777)
    after = checkpoint(ctx, session, f"after rewind of paths to {target}", kind="rewind")
    assert before.checkpoint is not None and after.checkpoint is not None
    return Rewind(
        session,
        "rewind",
        target,
        before.checkpoint,
        0,
        mount.status(ctx.session_dir(session.id)) is not None,
    )


def _operation(ctx: RepoContext, session: Session, op_id: int) -> Operation:
    store = DeltaStore(_delta(ctx, session), readonly=True)
    try:
        return next(o for o in history.operations(store.conn) if o.id == op_id)
    finally:
        store.close()


def undo(ctx: RepoContext, session: Session, *, force: bool = False) -> Rewind:
    """Back to before the last run or checkpoint; right after a rewind or undo, back to
    before that (an undo is undone the same way)."""
    found = listing(ctx, session)
    if not found.checkpoints:
        raise GitsessError(f"session {session.name} has no checkpoint to go back to")
    newest = found.checkpoints[-1].id
    last = found.operations[-1] if found.operations else None
    if last is not None and last.after == newest and not found.changed_since_last:
        return rewind(ctx, session, last.before, kind="undo", force=force)
    target = newest if found.changed_since_last else _previous_changed(ctx, session, found)
    return rewind(ctx, session, target, kind="undo", force=force)


def _previous_changed(ctx: RepoContext, session: Session, found: Listing) -> int:
    """The newest checkpoint the session changed since (the newest has no change since)."""
    store = DeltaStore(_delta(ctx, session), readonly=True)
    try:
        root = usage.cp_root(store.data_dir)
        for cp in reversed(found.checkpoints[:-1]):
            if history.changed_since(store.conn, root, cp.id):
                return cp.id
    finally:
        store.close()
    raise GitsessError(f"session {session.name} has not changed since its first checkpoint")


@dataclass(frozen=True)
class Retention:
    """`gitsess.checkpoints.keep` / `.maxAge`, `gitsess.log.maxEvents` / `.maxAge` (None:
    no limit of that kind)."""

    keep: int = KEEP
    max_age: timedelta | None = timedelta(days=MAX_AGE_DAYS)
    log_events: int = LOG_EVENTS
    log_age: timedelta | None = timedelta(days=MAX_AGE_DAYS)


@dataclass(frozen=True)
class Trimmed:
    checkpoints: int  # dropped
    events: int  # dropped from the audit log (their runs summarised)
    shrank: bool  # free pages given back to the disk


def trim(ctx: RepoContext, session: Session, keep: Retention) -> Trimmed | None:
    """Apply the retention to a session, through its daemon when it is mounted (None: it has
    no delta)."""
    if not SessionHandle(ctx, session).delta.exists():
        return None
    now = time.time_ns()
    far = 1 << 62
    age = far if keep.max_age is None else int(keep.max_age.total_seconds() * 1e9)
    before = 0 if keep.log_age is None else now - int(keep.log_age.total_seconds() * 1e9)
    for _ in range(ATTEMPTS):
        with _offline(ctx, session) as store:
            if store is not None:
                assert store.history is not None
                pruned = store.history.prune(keep.keep, age, now)
                dropped = retention.trim_log(store.conn, keep.log_events, before)
                return Trimmed(pruned, dropped, store.shrink(eager=True))
            done = _ask(
                ctx, session, "trim", protocol.trim, keep.keep, age, keep.log_events, before
            )
            if done is not None:
                return Trimmed(*done)
        mount.status(ctx.session_dir(session.id))
    raise _gone(session, "trim")


@dataclass(frozen=True)
class PathChange:
    """A path that differs between two states of a session."""

    path: str
    status: str  # A, D, M (content), T (kind), or P (mode only)
    patch: str  # a unified diff of its text, or a line saying how it differs

    def name_status(self) -> str:
        """Its line as `diff --name-status` prints it (the name quoted as git quotes it)."""
        return f"{self.status}\t{quote_path(self.path)}"


def compare(
    ctx: RepoContext,
    session: Session,
    from_cp: int,
    to_cp: int | None = None,
    pathspecs: Sequence[str] = (),
) -> list[PathChange]:
    """What changed from checkpoint `from_cp` to `to_cp` (default: the session now), among the
    paths the session touched in either (its `.git` aside) that git's `pathspecs` (from the
    top) select."""
    handle = SessionHandle(ctx, session)
    spec = Pathspec(pathspecs)
    with handle.view(at=from_cp) as old, handle.view(at=to_cp) as new:
        paths = sorted(
            {p for view in (old, new) for top in view.touched_paths() for p in _files(view, top)}
        )
        out = []
        for path in paths:
            if not spec.matches(path):
                continue
            change = _change(old, new, path)
            if change is not None:
                out.append(change)
        return out


def _files(view: OverlayView, path: str) -> Iterator[str]:
    entry = view.entry(path)
    if entry is not None and entry.kind == "dir":
        for name in view.listdir(path):
            yield from _files(view, f"{path}/{name}")
    elif entry is not None:
        yield path


def _content(view: OverlayView, path: str, kind: str) -> bytes:
    return os.fsencode(view.readlink(path)) if kind == "symlink" else view.read(path)


def _change(old: OverlayView, new: OverlayView, path: str) -> PathChange | None:
    a, b = old.entry(path), new.entry(path)
    if a is not None and a.kind == "dir":
        a = None
    if b is not None and b.kind == "dir":
        b = None
    if a is None and b is None:
        return None
    before = b"" if a is None else _content(old, path, a.kind)
    after = b"" if b is None else _content(new, path, b.kind)
    if a is None:
        status = "A"
    elif b is None:
        status = "D"
    elif a.kind != b.kind:
        status = "T"
    elif before != after:
        status = "M"
    elif a.mode != b.mode:
        return PathChange(path, "P", f"mode {a.mode:o} -> {b.mode:o}\n")
    else:
        return None
    try:
        lines = difflib.unified_diff(
            before.decode().splitlines(keepends=True),
            after.decode().splitlines(keepends=True),
            "/dev/null" if a is None else f"a/{path}",
            "/dev/null" if b is None else f"b/{path}",
        )
        patch = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    except UnicodeDecodeError:
        patch = f"Binary files a/{path} and b/{path} differ\n"
    return PathChange(path, status, patch)
