"""Looking into a session without mounting it: its usage, its drift, its own commits (its
files: `inspection_fs.py`, which `show` does not load).

Drift rows are written by the daemon's lower watch; `drift` keeps those whose path the session
still holds, so paths applied or dropped since stop warning. Usage is delta.db's size on disk
beside the bytes in use, changed paths, runs and their time, the last activity.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import apsw

from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext
from gitsess.overlay import schema
from gitsess.overlay.usage import Bytes as Bytes  # (re-exported: `show` renders it)
from gitsess.overlay.usage import (
    bytes_by_kind,
    data_bytes,
    last_event_ns,
    live_bytes,
    objects_bytes,
)
from gitsess.services.handle import SessionHandle
from gitsess.services.sessions import SessionInfo, runs
from gitsess.store.registry import Session

if TYPE_CHECKING:
    from gitsess.services.timeline import Drift


@dataclass(frozen=True)
class Usage:
    delta_bytes: int  # delta.db and its WAL on disk
    live_bytes: int  # of delta.db, the pages in use (the rest is free, given back in time)
    changed_files: int | None
    runs: int
    running: int
    run_seconds: float  # finished runs, plus running ones so far
    last_activity: datetime | None  # the last file change, run start or run end
    # Of delta_bytes: the live view, the checkpoints, the audit log, free pages (None: no delta).
    bytes_by_kind: Bytes | None = None
    objects_bytes: int = 0  # beside the delta: git's objects in the session, and those kept


def usage(ctx: RepoContext, info: SessionInfo) -> Usage:
    """Read through one read-only connection to delta.db: none of the delta store, its history
    or the audit log's reader is loaded (`show` took longer to import them than to read)."""
    session = info.session
    handle = SessionHandle(ctx, session)
    handle.sync()
    delta = handle.delta
    size = sum(p.stat().st_size for p in (delta, Path(f"{delta}-wal")) if p.exists())
    files = data_bytes(str(delta))
    size += files
    live = 0
    by_kind = None
    last_ns: int | None = None
    if delta.exists():
        try:
            conn = schema.connect(str(delta), readonly=True)
        except apsw.Error as e:
            raise _damaged(delta, e) from e
        try:
            live = live_bytes(conn) + files
            by_kind = info.bytes_by_kind  # (counted already for `show --json`)
            if by_kind is None:
                by_kind = bytes_by_kind(conn, schema.data_dir(str(delta)), files)
            last_ns = last_event_ns(conn)
        except apsw.Error as e:
            raise _damaged(delta, e) from e
        finally:
            conn.close()
    done = runs(ctx, session)
    now = datetime.now(UTC)
    seconds = sum(((r.ended_at or now) - r.started_at).total_seconds() for r in done)
    moments = [t for r in done for t in (r.started_at, r.ended_at) if t is not None]
    if last_ns is not None:
        moments.append(datetime.fromtimestamp(last_ns / 1e9, UTC))
    return Usage(
        delta_bytes=size,
        live_bytes=live,
        changed_files=info.changed_files,
        runs=len(done),
        running=sum(1 for r in done if r.ended_at is None),
        run_seconds=seconds,
        last_activity=max(moments, default=None),
        bytes_by_kind=by_kind,
        objects_bytes=objects_bytes(str(handle.dir)),
    )


def _damaged(delta: Path, error: apsw.Error) -> GitsessError:
    from gitsess.overlay.delta import DamagedDelta

    return DamagedDelta(delta, error)


def drift(session: Session, session_dir: Path) -> list[Drift]:
    """Paths the session changed that the real worktree changed too, still in the session.

    The daemon records drift as it happens; a path the session no longer holds (applied, or
    dropped) has nothing left to conflict with and is left out.
    """
    from gitsess.overlay import control, layout
    from gitsess.overlay.delta import drift_rows

    delta = layout.delta(session_dir)
    if control.serving(str(session_dir)):  # (see `SessionHandle.sync`)
        from gitsess.runtime import mount

        mount.sync(session_dir)
    if not delta.exists():
        return []
    # One query through a plain connection: the audit log's reader (`timeline.DeltaReader`)
    # took `ls` longer to load than to read.
    try:
        conn = schema.connect(str(delta), readonly=True)
        try:
            found = drift_rows(conn, after_ns=0)
        finally:
            conn.close()
    except apsw.Error as e:
        raise _damaged(delta, e) from e
    if not found or not session.worktree.is_dir():
        return []
    from gitsess.services.timeline import Drift

    rows = [Drift(path, time_ns) for path, time_ns in found]
    # What is hidden from the view (the state dir) never drifts: the watcher skips `.git`.
    from gitsess.overlay.view import OverlayView
    from gitsess.services.inspection_fs import Changes

    with OverlayView(delta, session.worktree) as view:
        changes = Changes(view)
    return [d for d in rows if changes.inside(d.path)]


@dataclass(frozen=True)
class OwnCommit:
    """A commit made inside the session that its branch lacks."""

    commit: str
    subject: str


def own_commits(ctx: RepoContext, session: Session) -> list[OwnCommit]:
    """The session's own commits, oldest first (`gitsess show` lists them): as `ls` last
    walked them, while the refs they follow from stay (`counts.own_commits`)."""
    from gitsess.services import counts, session_git
    from gitsess.services.real_tree import real_root

    handle = SessionHandle(ctx, session)
    if not handle.delta.exists():
        return []
    with handle.view() as view:
        try:
            refs = session_git.refs_of(view, session, real_root(session))
            own = None if refs is None else counts.own_commits(ctx, handle, view, refs)
        except GitsessError:  # a `.git` the session broke: no commits to list
            return []
        return [] if own is None else [OwnCommit(c, s) for c, s in own.commits]
