"""The live feed behind `gitsess watch`: file changes and drift as the session's daemon commits
them, read from delta.db (so watching never joins the session, and works from any terminal).

It wakes as `log --follow` does (`timeline.wakeups`: watchfiles on the session dir, not
recursively since `mnt/` is a FUSE mount, for `delta.db` and its WAL, debounced 100 ms, one
daemon commit; at least every second anyway; polling where watching fails). Each wake reads
the newest event id first, then the matching events up to it, so events a filter skips are
never scanned twice.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.services.timeline import POLL_SECONDS, DeltaReader, Drift, Event, Filter, wakeups
from gitsess.store.registry import Session

Change = Event | Drift


class Feed:
    """Changes from the moment it is made: what came before is `gitsess log`'s business.

    The starting point is taken when the feed is made, so a caller can say "watching" and be
    sure that nothing committed after that is missed.
    """

    def __init__(
        self,
        ctx: RepoContext,
        session: Session,
        *,
        stop: threading.Event | None = None,
        poll: float = POLL_SECONDS,
    ) -> None:
        self.session = session
        self.session_dir = ctx.session_dir(session.id)
        if not self.session_dir.is_dir():
            raise GitsessError(f"the directory of session {session.name} is missing")
        self.stop = stop
        self.poll = poll
        self._reader = DeltaReader(self.session_dir / "delta.db")
        self._last_id = self._reader.max_event_id()
        self._last_drift = max((d.time_ns for d in self._reader.drift()), default=0)

    def close(self) -> None:
        self._reader.close()

    def __iter__(self) -> Iterator[list[Change]]:
        try:
            for _ in wakeups(self.session_dir, self.stop, self.poll):
                if not self.session_dir.is_dir():
                    raise GitsessError(f"session {self.session.name} was removed")
                batch = self._changes()
                if batch:
                    yield batch
        finally:
            self.close()

    def _changes(self) -> list[Change]:
        newest = self._reader.max_event_id()
        events = self._reader.events(Filter(), after_id=self._last_id, upto_id=newest)
        self._last_id = newest
        drift = self._reader.drift(after_ns=self._last_drift)
        if drift:
            self._last_drift = max(d.time_ns for d in drift)
        changes: list[Change] = [*events, *drift]
        return sorted(changes, key=lambda c: c.time_ns)
