"""Applied paths taken out of the delta: once an apply wrote the session's changes into the real
worktree (or a commit the worktree has checked out), the session forgets them, so the view
shows the worktree there again. A part of `Tree` (`tree.py`); the daemon's drop op and an
offline drop (`services/live.py`) both come here, through `Tree.drop_applied`.

A path the session wrote to since the apply read it stays, with the directories above it
(checked here, between two requests, so no write slips in between). Directories left with no
change turn back into plain lower directories. The fsmonitor journal is told of every path
dropped; the audit log is not (no process asked).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gitsess.git.view import Stamp
from gitsess.overlay.attributes import Attributes
from gitsess.overlay.lower_layer import LowerLayer
from gitsess.overlay.namespace import Namespace
from gitsess.overlay.node_table import NodeTable
from gitsess.overlay.nodes import ROOT_INODE, Node, stamp
from gitsess.overlay.recorder import ChangeRecorder


@dataclass(frozen=True)
class DropResult:
    """What `AppliedPaths.drop` did: the kernel entries now stale (directory, name), and the
    paths kept because the session wrote to them since the apply read them."""

    entries: list[tuple[int, bytes]]
    kept: set[bytes]


class AppliedPaths:
    def __init__(
        self,
        table: NodeTable,
        names: Namespace,
        attrs: Attributes,
        lower: LowerLayer,
        recorder: ChangeRecorder,
    ) -> None:
        self.table = table
        self.nodes = table.nodes
        self.names = names
        self.attrs = attrs
        self.lower = lower
        self.recorder = recorder
        self.pending = table.pending

    def drop(
        self,
        paths: Iterable[bytes],
        restamp: Iterable[bytes] = (),
        expect: Mapping[bytes, Stamp | None] | None = None,
    ) -> DropResult:
        """Forget the session's changes at `paths`, now that the worktree has them, except
        where the session wrote since the apply read them (`expect`: their stamps then, None
        for absent); record the worktree's state anew for `restamp` paths (directories the
        apply wrote into, whose old record would read as an edit made outside)."""
        kept = self._written_since(expect or {})
        entries = self._drop([p for p in paths if p not in kept])
        self._restamp(restamp)
        return DropResult(entries, kept)

    def _written_since(self, expect: Mapping[bytes, Stamp | None]) -> set[bytes]:
        """Paths the session holds whose stamp is not what `expect` says: written to since
        an apply read them, so they must stay. Their parent directories too: dropping one
        drops what is below it."""
        moved = set()
        for path, want in expect.items():
            parent_path, _, name = path.rpartition(b"/")
            parent = self.table.resolve(parent_path)
            if parent is None or parent.entries is None or name not in parent.entries:
                continue
            ino = parent.entries[name]
            n = self.nodes.get(ino) if ino else None
            if n is not None and not n.upper:
                continue
            now = None
            if n is not None:
                a = self.attrs.getattr(n)
                now = Stamp(a.mode, a.size, a.mtime_ns)
            if now != want:
                moved.add(path)
        for path in list(moved):
            while path:
                path = path.rpartition(b"/")[0]
                moved.add(path)
        return moved

    def _drop(self, paths: list[bytes]) -> list[tuple[int, bytes]]:
        """Shallowest first: dropping a directory drops everything under it. A path whose
        parent directory is not merged in place (created, or renamed) stays: the worktree has
        no directory there to fall through to, and its content is already what the worktree
        has."""
        dropped: list[tuple[int, bytes]] = []
        for path in sorted(set(paths), key=lambda p: (p.count(b"/"), p)):
            parent_path, _, name = path.rpartition(b"/")
            parent = self.table.resolve(parent_path)
            if (
                parent is None
                or not parent.upper
                or parent.origin != parent_path
                or parent.entries is None
                or name not in parent.entries
            ):
                continue
            ino = parent.entries[name]
            del parent.entries[name]
            parent.subdirs = None
            self.pending.dentries[(parent.ino, name)] = None
            if ino:
                self.names.unname(self.nodes[ino])
            dropped.append((parent.ino, name))
            self.recorder.touched(path, is_dir=True)
            self._undrift(os.fsdecode(path))
            self._prune(parent, parent_path)
        return dropped

    def _undrift(self, path: str) -> None:
        """Forget the drift recorded at `path` and below. Also what is still pending: the
        watch reports the apply's own writes to the worktree, mostly just before the drop, and
        a commit deletes the drift it forgets before it writes the new (it stayed, so `ls`
        showed drift where the session held nothing)."""
        self.pending.undrift.add(path)
        below = path + "/"
        for pending in [p for p in self.pending.drift if p == path or p.startswith(below)]:
            del self.pending.drift[pending]

    def _restamp(self, paths: Iterable[bytes]) -> None:
        for path in paths:
            n = self.table.resolve(path)
            if n is None or not n.upper or n.origin is None:
                continue
            st = self.lower.stat(n.origin)
            if st is not None:
                n.origin_stamp = stamp(st)
                self.pending.nodes.add(n.ino)

    def _prune(self, d: Node, path: bytes) -> None:
        """Turn directories that hold no change any more back into plain lower directories."""
        while d.ino != ROOT_INODE and d.upper and d.origin == path and not d.entries:
            if d.xattrs:
                return
            parent = self.table.node(d.parent)
            assert parent.entries is not None
            parent.entries.pop(d.name, None)
            self.pending.dentries[(parent.ino, d.name)] = None
            self.pending.deleted.add(d.ino)
            self.pending.nodes.discard(d.ino)
            d.upper, d.lower, d.origin, d.entries, d.origin_stamp = False, path, None, None, None
            d.nlink = 1
            self.table.lower_index[path] = d.ino
            d, path = parent, path.rpartition(b"/")[0]
