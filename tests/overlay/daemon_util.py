"""A daemon's state made in the test's process, for tests of its handlers without a mount."""

from __future__ import annotations

from gitsess.overlay import daemon
from gitsess.overlay.checkpointer import Checkpointer
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.listahead import ListAhead
from gitsess.overlay.presence import Presence
from gitsess.overlay.tree import Tree


def unmounted_state(tree: Tree, store: DeltaStore, delta: str, mnt: str) -> daemon.DaemonState:
    """The state a daemon serving `tree` at `mnt` holds (nothing is mounted there)."""
    return daemon.DaemonState(
        tree,
        mnt,
        False,
        False,
        ListAhead(mnt),
        Presence(mnt, delta),
        Checkpointer(store.conn, delta),
    )
