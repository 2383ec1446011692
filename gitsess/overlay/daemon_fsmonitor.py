"""The daemon's side of git's fsmonitor hook: a query is answered from the session's journal
once the worktree watch has reported every change made before it (else "everything may have
changed"; asked of the watch process unless `LowerWatcher.quiet` knows), and the first
status's sweep of the index is started ahead of git's query.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import trio

from gitsess.overlay.index_view import TOKEN_PREFIX, Mark

if TYPE_CHECKING:
    from gitsess.overlay.daemon import DaemonState, Reply

# How long an fsmonitor query waits for the worktree watch to report what changed before it;
# past that, it answers "everything may have changed".
LOWER_SYNC_TIMEOUT = 1.0
# How long the first fsmonitor query of a view just mounted waits for the worktree watch to be
# in place (some 0.2 s when the worktree's watch process starts too): without it, git looks up
# every file through FUSE instead.
WATCH_WAIT = 2.0


async def answer(state: DaemonState, msg: dict[str, Any]) -> Reply:
    """The reply to an fsmonitor query (`protocol.FSMONITOR`)."""
    asked = str(msg.get("token", ""))
    # (a token no journal of this daemon's knows: a remount's, see `IndexView.remounted`,
    # also waits for the watch being set up)
    first = asked.startswith(TOKEN_PREFIX)
    unknown = first or state.tree.journal.since(asked) is None
    synced = await lower_synced(state, wait=unknown)
    if synced and unknown:
        await _swept_ahead(state, own=not first)
    return _answer(state, msg, synced)


async def lower_synced(
    state: DaemonState, *, wait: bool = False, timeout: float = LOWER_SYNC_TIMEOUT
) -> bool:
    """Whether every change the worktree saw before now is in the journal (see
    `LowerWatcher.sync`, given `timeout`); from a thread, as the watch's reports need the event
    loop. With `wait`, a watch still being set up (a view just mounted) is waited for a
    moment."""
    watcher = state.watcher
    if wait and watcher is not None and _mark(state) is None:
        # (the watch in place for the watcher too: the view counts it watched a moment
        # before, while the kernel forgets what it learnt meanwhile, and a sync then fails)
        await trio.to_thread.run_sync(watcher.wait_in_place, WATCH_WAIT, abandon_on_cancel=True)
    if watcher is None or not state.tree.watched:
        return False
    if watcher.quiet():
        return True  # (nothing changed since the watch last reported: most queries)
    return await trio.to_thread.run_sync(watcher.sync, timeout, abandon_on_cancel=True)


async def _swept_ahead(state: DaemonState, *, own: bool) -> None:
    """For a token no journal knows: until the sweep of the index it names (the real index
    shown, or with `own` the session's own the view mounted with) is done."""
    view = state.tree.index_view
    if view is not None and (not own or view.remounting):
        wait = functools.partial(view.wait_swept, WATCH_WAIT, own=own)
        await trio.to_thread.run_sync(wait)


def _answer(state: DaemonState, msg: dict[str, Any], synced: bool) -> Reply:
    """What changed since the token: unless the journal holds every change of the worktree
    made before the query, "everything may have changed". The token of the index the view
    shows while it follows the real one (`index_view.py`) is answered from the session's own
    paths and an `lstat` of the worktree's files, once, as long as the view still shows it."""
    journal = state.tree.journal
    token, since = journal.token(), str(msg.get("token", ""))
    paths: list[bytes] | None = None
    if not synced:
        pass
    elif since.startswith(TOKEN_PREFIX):
        shown, view = state.tree.resolve(state.tree.lower.git.index_file), state.tree.index_view
        if view is not None and shown is not None and not shown.upper:
            paths = view.changed(since, state.tree, lambda mark: _since_mark(state, mark))
    else:
        paths = journal.since(since)
        view = state.tree.index_view
        if paths is None and view is not None:
            paths = view.remounted(since, state.tree, lambda mark: _since_mark(state, mark))
    return {
        "ok": True,
        "token": token,
        "paths": None if paths is None else [os.fsdecode(p) for p in paths],
    }, None


def _mark(state: DaemonState) -> Mark | None:
    """Where the lower watch stands (its connection, the journal's token), None while it
    is not in place: a sweep of the worktree started now misses nothing the journal holds
    after this."""
    watcher = state.watcher
    connection = watcher.connection() if watcher is not None else None
    if connection is None or not state.tree.watched:
        return None
    return connection, state.tree.journal.token()


def _synced_mark(state: DaemonState) -> Mark | None:
    """`_mark` once the watch is in place and the journal holds what it saw before now (from
    a thread): what changed just before the sweep, the sweep sees, and need not be in its
    answer too (a worktree busy just before, a checkout, would otherwise have git `lstat` all
    it changed). A watch still being set up is waited for (`WATCH_WAIT`): the sweeps of a view
    just mounted (ahead, or at git's first read of the index) start before it is in place."""
    watcher = state.watcher
    if (
        watcher is None
        or not watcher.wait_in_place(WATCH_WAIT)
        or not watcher.sync(LOWER_SYNC_TIMEOUT)
    ):
        return None
    return _mark(state)


def _since_mark(state: DaemonState, mark: Mark) -> list[bytes] | None:
    """What the journal holds after `mark`, None when changes may have gone unreported since
    (the watch connected anew)."""
    watcher = state.watcher
    if watcher is None or watcher.connection() != mark[0]:
        return None
    return state.tree.journal.since(mark[1])


async def sweep_ahead(state: DaemonState) -> None:
    """The real index (or the session's own, the view mounted with one) parsed at once, and
    swept (see `IndexView.sweep_ahead`) the moment the lower watch is in place (its sweep
    waits for that, `_synced_mark`), before git asks: a session's first command is usually a
    status, which comes right after the mount."""
    view = state.tree.index_view
    if view is None:
        return
    view.mark = lambda: _synced_mark(state)
    index = state.tree.resolve(state.tree.lower.git.index_file)
    if index is None or (index.upper and not view.remounting):
        return  # the session's own index, made since the mount: nothing to sweep
    await trio.to_thread.run_sync(view.sweep_ahead, abandon_on_cancel=True)
