"""The daemon's main loop: FUSE requests served directly, trio run as its guest.

With trio's own loop, a request that arrived while the daemon slept woke it through trio's
epoll, a run-loop iteration and a task reschedule: some 20 us of Python per request, for a
client that works through files one at a time almost every request (docs/PERFORMANCE.md, item
1). Here the main thread sleeps in poll(2) on the FUSE device and on a wake-up fd (the GIL
released) and serves a request the moment it is there (`pyfuse3.serve`, patch 0003 of gitsess's
build of pyfuse3). trio runs as a guest (`trio.lowlevel.start_guest_run`): it waits for its own
I/O and deadlines in a thread of its own, and hands each of its ticks to this loop, which runs
it on the main thread between two requests. FUSE handlers and trio's tasks therefore still take
turns on one thread and never run at once, as under `trio.run`; a tick that is ready goes
before the next request, so a burst of requests cannot starve the control socket.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pyfuse3
import trio

if TYPE_CHECKING:
    import outcome  # trio's own dependency: what a guest run ends with

T = TypeVar("T")


class HostLoop:
    """Runs one trio guest run while serving the FUSE session (see the module's text)."""

    def __init__(self) -> None:
        self._calls: collections.deque[Callable[[], object]] = collections.deque()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._outcome: outcome.Outcome[Any] | None = None

    def run(self, main: Callable[[trio.Event], Awaitable[T]]) -> T:
        """Run `main(fuse_ended)` as trio's guest until it returns; `fuse_ended` is set once
        the FUSE session ended (unmounted, or `pyfuse3.terminate`)."""
        ended = trio.Event()
        token: trio.lowlevel.TrioToken | None = None
        serving = True

        async def guest() -> T:
            nonlocal token
            token = trio.lowlevel.current_trio_token()
            if not serving:
                ended.set()
            return await main(ended)

        trio.lowlevel.start_guest_run(
            guest,
            run_sync_soon_threadsafe=self._call_threadsafe,
            run_sync_soon_not_threadsafe=self._calls.append,
            done_callback=self._done,
        )
        try:
            while True:
                while self._calls:
                    self._calls.popleft()()
                if self._outcome is not None:
                    break
                if serving:
                    serving = pyfuse3.serve(self._wake, self._calls)
                    if not serving and token is not None:
                        token.run_sync_soon(ended.set)
                else:
                    select.select([self._wake], [], [])
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._wake)
        finally:
            # Only once trio is done: until then its thread may still write to the eventfd,
            # and a closed number can be reused by a file the daemon goes on to write.
            if self._outcome is not None:
                os.close(self._wake)
        return self._outcome.unwrap()  # type: ignore[no-any-return]

    def _call_threadsafe(self, fn: Callable[[], object]) -> None:
        self._calls.append(fn)
        os.eventfd_write(self._wake, 1)

    def _done(self, result: outcome.Outcome[Any]) -> None:
        self._outcome = result
