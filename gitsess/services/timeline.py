"""What happened in a session: the audit log of delta.db, grouped by the runs of the registry.

delta.db is read through a read-only connection of our own. It is in WAL mode, so the live
daemon keeps committing while we read; `mount.sync` first makes its last ~100 ms visible.

Events are filtered in SQL (since, a path GLOB where a directory matches what is below it and
a rename matches by either end, pid, op, run), then grouped by the registry's runs in start
order; events of no run (a `gitsess mount` user) sit between the runs they happened between.
The two databases are joined here rather than copying runs into delta.db: the registry stays
the one place for runs. A run whose `gitsess run` is gone without ending it is ended when read
(its pid is gone or names a newer process), with no exit code.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import apsw

from gitsess.errors import GitsessError, option
from gitsess.git.location import RepoContext
from gitsess.overlay import delta, layout, schema, usage
from gitsess.overlay.delta import DamagedDelta
from gitsess.overlay.retention import RunSummary, summaries
from gitsess.runtime import mount
from gitsess.services.sessions import runs
from gitsess.store.registry import Session
from gitsess.store.rows import Run

T = TypeVar("T")

# What the overlay records (gitsess/overlay/fs.py); `--op` accepts only these.
OPS = frozenset(
    {
        "create",
        "mknod",
        "mkdir",
        "symlink",
        "link",
        "unlink",
        "rmdir",
        "rename",
        "write",
        "truncate",
        "fallocate",
        "chmod",
        "chown",
        "setxattr",
        "removexattr",
    }
)

# The files whose changes mean "the daemon committed": its WAL, and the database itself on a
# checkpoint or when it is first created.
DELTA_FILES = frozenset({layout.DELTA, layout.DELTA + "-wal"})
# A follower re-reads this often even without a file notification (a missed inotify event,
# or a file system without them), and this is how often the poll fallback looks.
POLL_SECONDS = 1.0
# The daemon commits every 100 ms; group notifications over no more than that.
DEBOUNCE_MS = 100
STEP_MS = 20
# How often the watch hands control back to Python when nothing happens.
TICK_MS = 50

_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:s|m|min|h|d|w))+")
_PART = re.compile(r"(\d+(?:\.\d+)?)(s|min|m|h|d|w)")
_UNIT_SECONDS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Event:
    """One mutating operation through the session's mount."""

    id: int
    time_ns: int
    op: str
    path: str
    target: str | None  # rename, link: the new path; symlink: what it points to
    bytes: int | None  # write: bytes written through one open file
    pid: int | None
    process: str | None  # the process's name (comm)
    cmdline: str | None
    role: str | None
    run_id: int | None

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.time_ns / 1e9, UTC)


@dataclass(frozen=True)
class Drift:
    """The real worktree changed a path that the session changed too."""

    path: str
    time_ns: int

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.time_ns / 1e9, UTC)


@dataclass(frozen=True)
class Filter:
    since_ns: int | None = None
    path: str | None = None  # a glob; a directory also matches everything below it
    pid: int | None = None
    ops: tuple[str, ...] = ()
    run_id: int | None = None

    @property
    def selects_events(self) -> bool:
        """Whether it asks for particular events, so runs without any are left out."""
        return self.path is not None or self.pid is not None or bool(self.ops)


@dataclass(frozen=True)
class Group:
    """A run and its events; `run` is None for events of no run (a `gitsess mount` user).
    `trimmed`: what its events the log's retention dropped said (counts per op, bytes)."""

    run: Run | None
    events: list[Event]
    trimmed: RunSummary | None = None


@dataclass(frozen=True)
class Timeline:
    groups: list[Group]
    last_id: int  # the newest event when it was read: a follower goes on after it


def parse_since(text: str, now: datetime | None = None) -> int:
    """A time in ns since the epoch from "10m", "2h30m", "1d" (ago) or an ISO date/time."""
    now = now or datetime.now(UTC)
    spec = text.strip()
    if _DURATION.fullmatch(spec):
        seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(spec))
        try:
            return _ns(now - timedelta(seconds=seconds))
        except OverflowError:
            return 0  # further back than a datetime reaches: before every event
    try:
        when = datetime.fromisoformat(spec)
    except ValueError:
        raise GitsessError(
            f"{option('since')} {text!r}: give a duration such as 30s, 10m, 2h, 1d, 1w (ago)"
            " or an ISO date/time such as 2024-05-01T14:00"
        ) from None
    # A time typed without a zone is the user's local time.
    try:
        return _ns(when if when.tzinfo else when.astimezone())
    except (OverflowError, ValueError):  # the local time of year 1 or 9999 is out of range
        return 0 if when.year < 1970 else _LAST_NS


_LAST_NS = (1 << 63) - 1


def _ns(when: datetime) -> int:
    """`when` in ns since the epoch, as SQLite's integers can hold it: a time before 1970 is
    before every event, one past 2262 after every event."""
    return min(max(int(when.timestamp() * 1_000_000_000), 0), _LAST_NS)


def make_filter(
    *,
    since: str | None = None,
    path: str | None = None,
    pid: int | None = None,
    ops: tuple[str, ...] = (),
    run_id: int | None = None,
) -> Filter:
    unknown = sorted(set(ops) - OPS)
    if unknown:
        raise GitsessError(
            f"unknown operation {', '.join(unknown)}; known: {', '.join(sorted(OPS))}"
        )
    if path is not None:
        # Paths in the log are relative to the worktree root, without "./" or a trailing "/".
        path = path.removeprefix("./").rstrip("/") or "*"
    return Filter(
        since_ns=None if since is None else parse_since(since),
        path=path,
        pid=pid,
        ops=tuple(dict.fromkeys(ops)),
        run_id=run_id,
    )


class DeltaReader:
    """Read-only queries on one session's delta.db; waits for the file if it is not there yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: apsw.Connection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> DeltaReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, query: Callable[[apsw.Connection], T], empty: T) -> T:
        conn = self._connection()
        if conn is None:
            return empty
        try:
            return query(conn)
        except apsw.Error as e:
            raise DamagedDelta(self.path, e) from e

    def _connection(self) -> apsw.Connection | None:
        if self._conn is None:
            if not self.path.exists():
                return None
            try:
                conn = schema.connect(str(self.path), readonly=True)
                version = schema.pragma(conn, "user_version")
            except apsw.Error as e:
                raise DamagedDelta(self.path, e) from e
            # A delta from before the audit log has no events yet: the daemon migrates it when
            # it next mounts the session, and a reader must not write.
            if version < 2:
                conn.close()
                return None
            self._conn = conn
        return self._conn

    def max_event_id(self) -> int:
        return self._read(delta.max_event_id, 0)

    def events(self, flt: Filter, *, after_id: int = 0, upto_id: int | None = None) -> list[Event]:
        rows: list[tuple[Any, ...]] = self._read(
            lambda conn: delta.event_rows(
                conn,
                after_id=after_id,
                upto_id=upto_id,
                since_ns=flt.since_ns,
                path=flt.path,
                pid=flt.pid,
                ops=flt.ops,
                run_id=flt.run_id,
            ),
            [],
        )
        return [Event(*row) for row in rows]

    def trimmed(self) -> dict[int, RunSummary]:
        """The runs (0: no run) whose older events the log's retention dropped."""
        return self._read(summaries, {})

    def op_counts(self) -> dict[str, int]:
        """How many events of each operation the log holds."""
        return self._read(delta.op_counts, {})

    def last_event_ns(self) -> int | None:
        return self._read(usage.last_event_ns, None)

    def drift(self, *, after_ns: int = 0) -> list[Drift]:
        rows: list[tuple[str, int]] = self._read(
            lambda conn: delta.drift_rows(conn, after_ns=after_ns), []
        )
        return [Drift(path, time_ns) for path, time_ns in rows]


def delta_path(ctx: RepoContext, session: Session) -> Path:
    return layout.delta(ctx.session_dir(session.id))


def _check_run(session: Session, flt: Filter, known: list[Run]) -> None:
    if flt.run_id is not None and all(r.id != flt.run_id for r in known):
        raise GitsessError(f"session {session.name} has no run {flt.run_id}")


def timeline(ctx: RepoContext, session: Session, flt: Filter) -> Timeline:
    """The session's events matching `flt`, grouped by run, in the order things happened.

    Runs come in the order they started, each with its events. Events of no run are grouped
    between the runs they happened between. Without an event criterion (path, pid, op), runs
    that changed nothing are listed too: running `pytest` in a session is part of its story.
    """
    all_runs = runs(ctx, session)
    _check_run(session, flt, all_runs)
    mount.sync(ctx.session_dir(session.id))
    with DeltaReader(delta_path(ctx, session)) as reader:
        last_id = reader.max_event_id()
        events = reader.events(flt, upto_id=last_id)
        # (a summary has no paths or pids to match: shown when no event is asked for)
        trimmed = {} if flt.selects_events else reader.trimmed()
    by_run: dict[int, list[Event]] = {}
    loose: list[Event] = []
    known = {r.id for r in all_runs}
    for e in events:
        if e.run_id is not None and e.run_id in known:
            by_run.setdefault(e.run_id, []).append(e)
        else:
            loose.append(e)
    shown = [r for r in all_runs if _shows(r, flt, by_run)]
    groups: list[Group] = []
    if 0 in trimmed and flt.since_ns is None and flt.run_id is None:
        groups.append(Group(None, [], trimmed[0]))
    pending = iter(loose)
    nxt = next(pending, None)
    for run in shown:
        start = _ns(run.started_at)
        stretch: list[Event] = []
        while nxt is not None and nxt.time_ns < start:
            stretch.append(nxt)
            nxt = next(pending, None)
        if stretch:
            groups.append(Group(None, stretch))
        groups.append(Group(run, by_run.get(run.id, []), trimmed.get(run.id)))
    rest = ([] if nxt is None else [nxt]) + list(pending)
    if rest:
        groups.append(Group(None, rest))
    return Timeline(groups, last_id)


def _shows(run: Run, flt: Filter, by_run: dict[int, list[Event]]) -> bool:
    if run.id in by_run:
        return True
    if flt.selects_events or (flt.run_id is not None and run.id != flt.run_id):
        return False
    if flt.since_ns is None:
        return True
    # A run that overlaps the window counts, even one that started before it.
    return run.ended_at is None or _ns(run.ended_at) >= flt.since_ns


def follow(
    ctx: RepoContext,
    session: Session,
    flt: Filter,
    *,
    after_id: int,
    stop: threading.Event | None = None,
    poll: float = POLL_SECONDS,
) -> Iterator[list[Event]]:
    """Batches of the events after `after_id` that match `flt`, as the daemon commits them.

    Runs until `stop` is set (or the consumer stops iterating); raises when the session goes.
    """
    _check_run(session, flt, runs(ctx, session) if flt.run_id is not None else [])
    session_dir = ctx.session_dir(session.id)
    seen = after_id
    with DeltaReader(layout.delta(session_dir)) as reader:
        for _ in wakeups(session_dir, stop, poll):
            if not session_dir.is_dir():
                raise GitsessError(f"session {session.name} was removed")
            # Up to the newest id first: events the filter skips are never scanned again.
            newest = reader.max_event_id()
            if newest <= seen:
                continue
            batch = reader.events(flt, after_id=seen, upto_id=newest)
            seen = newest
            if batch:
                yield batch


def wakeups(
    session_dir: Path, stop: threading.Event | None = None, poll: float = POLL_SECONDS
) -> Iterator[None]:
    """Whenever delta.db changes, and at least every `poll` seconds.

    The first wake comes once the watch is in place (within a tick), so that a caller who
    reads on every wake misses nothing written before it.
    """
    import watchfiles  # here: the commands that only read a timeline load none of it

    ticks_per_poll = max(1, round(poll * 1000 / TICK_MS))
    quiet: int | None = None  # ticks since the last wake; None before the first
    try:
        # Not recursive: `mnt/` below the session dir may be the session's own FUSE mount.
        for changes in watchfiles.watch(
            session_dir,
            watch_filter=lambda _change, path: Path(path).name in DELTA_FILES,
            recursive=False,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            rust_timeout=TICK_MS,
            yield_on_timeout=True,
            stop_event=stop,
            ignore_permission_denied=True,
        ):
            if changes or quiet is None or quiet + 1 >= ticks_per_poll:
                quiet = 0
                yield
            else:
                quiet += 1
    except (OSError, RuntimeError):
        # No file notifications here (inotify limits, a gone directory): poll instead; the
        # caller sees a gone session directory and stops.
        while stop is None or not stop.is_set():
            yield
            if stop is None:
                time.sleep(poll)
            else:
                stop.wait(poll)
