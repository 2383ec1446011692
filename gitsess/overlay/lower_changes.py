"""What the real worktree changing underneath does to the merged view: the drift recorded (a path
the session copied changed in the worktree too), the fsmonitor journal told, and the kernel
caches that went stale. A part of `Tree` (`tree.py`), fed by the lower watch
(`lower_watcher.py`).

Until the lower watch is in place (`LowerLayer.watched`), every entry, attribute and "missing"
is cached by the kernel for 1 s instead of 300 s; `catch_up` records drift and invalidates
what the kernel may hold once it is.
"""

from __future__ import annotations

import os
import time

from gitsess.overlay.fsmonitor import FsmonitorJournal
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import ROOT_INODE, stamp

Stale = tuple[list[tuple[int, bytes]], list[int]]  # kernel entries (dir ino, name), inodes


class LowerChanges:
    def __init__(self, table: NodeTable, lower: LowerLayer, journal: FsmonitorJournal) -> None:
        self.table = table
        self.nodes = table.nodes
        self.lower = lower
        self.journal = journal

    def stale_caches(self, rels: set[bytes]) -> Stale:
        """Kernel cache entries (dir ino, name) and inodes that changes to these lower paths
        make stale: names the view shows from the lower layer, and files that still follow it."""
        dirs: dict[bytes, list[int]] = {}
        follow: dict[bytes, list[int]] = {}
        copied: set[bytes] = set()
        for n in list(self.nodes.values()):
            if not n.upper or n.origin is None:
                continue
            if n.entries is not None:
                dirs.setdefault(n.origin, []).append(n.ino)
                continue
            copied.add(n.origin)
            if n.data == 0:
                follow.setdefault(n.origin, []).append(n.ino)
        entries: list[tuple[int, bytes]] = []
        inodes: list[int] = []
        now = time.time_ns()
        lower_index = self.table.lower_index
        for rel in rels:
            self.journal.note(rel)
            parent, _, name = rel.rpartition(b"/")
            self.lower.forget_listing(parent)
            shadowed = any(name in (self.nodes[d].entries or {}) for d in dirs.get(parent, ()))
            if rel in copied or shadowed:
                # The worktree changed a path the session changed too: remember the drift.
                self.table.pending.drift[os.fsdecode(rel)] = now
            lower_dir = lower_index.get(parent)
            for ino in [*dirs.get(parent, ()), *([lower_dir] if lower_dir else [])]:
                entries.append((ino, name))
                self.nodes[ino].subdirs = None
            ino = lower_index.get(rel)
            if ino is not None:
                inodes.append(ino)
            inodes.extend(follow.get(rel, ()))
        # A descriptor of the old file would go on reading it.
        self.lower.close(inodes)
        return entries, inodes

    def catch_up(self) -> Stale:
        """What the lower watch could not see before it was in place (it starts while the
        view is already served, and nothing watches an unmounted session): records drift for
        every file the session copied whose worktree original changed since, drops the
        worktree `lstat`s kept on lower nodes, and returns, as `stale_caches` does, the kernel
        inodes of every node, and the entries of those that are not directories. A fresh
        lookup makes the kernel take everything about a name anew. A directory's name stays:
        an invalidated name is unhashed, and a process whose working directory it is could no
        longer `getcwd`; and invalidating a name detaches whatever is mounted on it (so a run
        binds nothing on a file of the view: `runtime/inplace.py`). What the kernel learnt
        before, it caches for a second only (`LowerLayer.watched`). No fsmonitor token given
        before holds either (`restart`): a change the watch missed meanwhile is in no journal."""
        self.journal.restart()
        self.lower.watched = True
        self.lower.close_all()
        now = time.time_ns()
        entries: list[tuple[int, bytes]] = []
        inodes: list[int] = []
        for n in self.nodes.values():
            n.st = None
            if (
                n.upper
                and n.entries is None
                and n.origin is not None
                and n.origin_stamp is not None
                and stamp(self.lower.stat(n.origin)) != n.origin_stamp
            ):
                self.table.pending.drift[os.fsdecode(n.origin)] = now
            if n.ino != ROOT_INODE:
                inodes.append(n.ino)
                if not n.is_dir:
                    entries.append((n.parent, n.name))
        return entries, inodes

    def lose_watch(self) -> Stale:
        """The lower watch ended: what the kernel holds is asked again, as `catch_up` does,
        and what the daemon answers until a new watch catches up is cached for a second."""
        stale = self.catch_up()
        self.lower.watched = False
        return stale
