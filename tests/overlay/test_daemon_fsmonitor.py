"""The daemon's side of git's fsmonitor hook, in process on the daemon's own tree over a real
worktree and its real lower watch (no mount): the sweep of the index started ahead as the view
mounts waits for the watch to be in place, rather than failing at once without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from gitsess.overlay import daemon, daemon_fsmonitor
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.index_view import IndexView, Mark
from gitsess.overlay.lower_watcher import LowerWatcher
from gitsess.overlay.tree import Tree
from tests.overlay.daemon_util import unmounted_state
from tests.util import make_repo


def test_the_sweep_ahead_waits_for_the_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (however long a loaded machine takes to start the watch process)
    monkeypatch.setattr(daemon_fsmonitor, "WATCH_WAIT", 60.0)
    worktree = make_repo(tmp_path / "wt", {"a.txt": "a\n", "src/b.py": "b = 1\n"})
    (tmp_path / "session").mkdir()
    delta = str(tmp_path / "session" / "delta.db")
    mnt = str(tmp_path / "mnt")
    store = DeltaStore(delta)
    tree = Tree(store, str(worktree), set())
    view = IndexView(tree.lower_path(tree.lower.git.index_file), tree.root, os.fsencode(mnt))
    view.note_mounted(tree)
    tree.index_view = view
    state = unmounted_state(tree, store, delta, mnt)

    # As the daemon wires it, the kernel left out: in place once the tree caught up.
    def in_place() -> None:
        tree.catch_up()

    def lost() -> None:
        tree.lose_watch()

    watcher = LowerWatcher(tree.root, lambda rels: None, in_place, lost)
    # Where each sweep found the watch (None: not in place, the sweep was for nothing).
    marks: list[Mark | None] = []
    synced_mark = daemon_fsmonitor._synced_mark

    def recorded(state: daemon.DaemonState) -> Mark | None:
        mark = synced_mark(state)
        marks.append(mark)
        return mark

    monkeypatch.setattr(daemon_fsmonitor, "_synced_mark", recorded)
    state.watcher = watcher
    try:
        watcher.start()  # it starts the worktree's watch process: not in place yet
        trio.run(daemon_fsmonitor.sweep_ahead, state)
        swept = view._sweeps.get("real")
        assert swept is not None
        assert swept.done.wait(60)
        assert swept.mark is not None  # done with the watch in place: a query can trust it
        assert marks and None not in marks  # no sweep started ahead ran without the watch
        assert tree.watched
    finally:
        watcher.stop()
        state.checkpoints.close()
        tree.close()
        store.close()
