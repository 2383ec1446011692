"""A session's view read straight from delta.db and the worktree, with no mount needed.

Implements `gitsess.git.view.SessionView` for diff and apply, and backs `gitsess fs`. Safe beside
a live daemon: it opens the tree as a reader and never writes (ask the daemon to `sync` first
to see its latest state). It reads delta.db in one read transaction, so every row it sees is of
one daemon commit; a data file such a snapshot names but the daemon removed since (a whole-file
rename in the session) is `ESTALE`, "changed while it was read; try again", never zeros. With
`at`, it reads a checkpoint through `DeltaAt`.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import apsw

from gitsess.git.view import Entry, kind_of
from gitsess.overlay import objectdir
from gitsess.overlay.delta import DamagedDelta, DeltaAt, DeltaStore
from gitsess.overlay.gitdir import GitLayout, in_git
from gitsess.overlay.nodes import ROOT_INODE, Node
from gitsess.overlay.tree import Tree

if TYPE_CHECKING:
    from gitsess.git.session_objects import ObjectFiles

__all__ = ["DamagedDelta", "OverlayView"]

# How much of a file is read at once when it is read in parts.
READ_CHUNK = 1 << 20


class OverlayView:
    def __init__(
        self,
        delta: Path,
        lower: Path,
        hidden: tuple[str, ...] = (),
        at: int | None = None,
    ) -> None:
        """`at`: the view as it was at that checkpoint."""
        try:
            # Read only once it exists (a session never mounted has none yet): inside a run
            # the session dir is read-only, and a delta.db no daemon holds (no WAL beside it)
            # cannot be opened for writing there.
            path = str(delta)
            self.store = (
                DeltaStore(path, readonly=delta.exists()) if at is None else DeltaAt(path, at)
            )
        except apsw.Error as e:
            raise DamagedDelta(delta, e) from e
        try:
            # One read transaction for the view's life: every row it reads (nodes, names,
            # inline bytes) is of one commit of the daemon's, however it goes on writing.
            self.store.conn.execute("BEGIN")
            hide = {os.fsencode(h) for h in hidden}
            self.tree = Tree(self.store, str(lower), hide, writer=False)
        except apsw.Error as e:
            self.store.close()
            raise DamagedDelta(delta, e) from e
        # Directories resolved so far, by path: diff and apply ask about every changed path
        # two or three times, and a walk from the root took a lookup per level each time. The
        # tree is read once and never written through here, so a directory stays what it was.
        self._dirs: dict[bytes, Node | None] = {}

    def close(self) -> None:
        self.tree.close()
        if not self.store.conn.getautocommit():
            self.store.conn.execute("ROLLBACK")  # it only read
        self.store.close()

    def __enter__(self) -> OverlayView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _resolve(self, path: str) -> Node | None:
        raw = os.fsencode(path)
        if in_git(raw):
            return None
        if not raw:
            return self.tree.node(ROOT_INODE)
        parent_path, _, name = raw.rpartition(b"/")
        parent = self._dir(parent_path)
        if parent is None:
            return None
        try:
            return self.tree.find(parent.ino, name)
        except OSError:
            return None

    def _dir(self, path: bytes) -> Node | None:
        if path not in self._dirs:
            n = self.tree.resolve(path)
            self._dirs[path] = n if n is not None and n.is_dir else None
        return self._dirs[path]

    def touched_paths(self) -> Iterator[str]:
        yield from self._touched(self.tree.node(ROOT_INODE), b"")

    def _touched(self, d: Node, at: bytes) -> Iterator[str]:
        for name, ino in sorted((d.entries or {}).items()):
            if d.ino == ROOT_INODE and in_git(name):
                continue
            path = at + b"/" + name if at else name
            child = self.tree.nodes.get(ino) if ino else None
            if child is not None and child.is_dir and child.origin == path:
                # Merged in place: only what changed inside it is touched.
                yield from self._touched(child, path)
            else:
                yield os.fsdecode(path)

    def holds(self, path: str) -> bool:
        """Whether the session keeps a record at `path` (a node of its own or a whiteout);
        a path it does not hold shows whatever the worktree has, and no write went there."""
        raw = os.fsencode(path)
        parent_path, _, name = raw.rpartition(b"/")
        parent = self._dir(parent_path)
        if parent is None or parent.entries is None or name not in parent.entries:
            return False
        ino = parent.entries[name]
        return not ino or self.tree.nodes[ino].upper

    def entry(self, path: str) -> Entry | None:
        n = self._resolve(path)
        if n is None:
            return None
        try:
            a = self.tree.getattr(n)
        except OSError:
            return None
        return Entry(kind_of(a.mode), a.mode, a.size, a.mtime_ns)

    def is_dir(self, path: str) -> bool:
        raw = os.fsencode(path)
        return not in_git(raw) and self._dir(raw) is not None

    def read(self, path: str) -> bytes:
        return self.tree.read_whole(self._need(path))

    @contextmanager
    def open(self, path: str) -> Iterator[BinaryIO]:
        n = self._need(path)
        self.tree.opened(n)
        try:
            yield io.BufferedReader(_NodeReader(self.tree, n), READ_CHUNK)
        finally:
            self.tree.released(n)

    def readlink(self, path: str) -> str:
        return os.fsdecode(self.tree.readlink(self._need(path)))

    def listdir(self, path: str) -> list[str]:
        n = self._need(path)
        names = [os.fsdecode(x) for x in self.tree.listing(n)]
        if n.ino == ROOT_INODE:
            names = [x for x in names if not in_git(os.fsencode(x))]
        return sorted(names)

    def removed_at(self, path: str) -> int | None:
        return self._removals.get(path)

    @cached_property
    def _removals(self) -> dict[str, int]:
        return self.store.removals()

    def copied_from(self, path: str) -> Entry | None:
        n = self._resolve(path)
        # A record belongs to the path it was taken at: a file renamed here says nothing about
        # what the worktree had at this path.
        if n is None or not n.upper or n.origin_stamp is None or n.origin != os.fsencode(path):
            return None
        mode, size, mtime_ns = n.origin_stamp
        return Entry(kind_of(mode), mode, size, mtime_ns)

    def touched_git(self) -> bool:
        """Whether the session changed anything of its git state (else it is the real one)."""
        root = self.tree.node(ROOT_INODE)
        return root.entries is not None and any(map(in_git, root.entries))

    @property
    def git(self) -> GitLayout:
        """Where the view keeps its git state."""
        return self.tree.lower.git

    def read_git(self, rel: str) -> bytes | None:
        """The bytes of git state `rel` (`GitLayout.path`) as the session sees it; None when
        it is not a file."""
        n = self.tree.resolve(os.fsencode(self.git.path(rel)))
        if n is None or n.is_dir:
            return None
        try:
            return self.tree.read_whole(n)
        except OSError:
            return None

    def own_objects(self) -> ObjectFiles:
        """The session's own object files: its store and what its checkpoints kept
        (`objectdir.py`), or, for a session from before not yet loaded by a writer, the rows
        it kept below an object store of its own in the view."""
        at = objectdir.view_path(self.git)
        n = self.tree.resolve(at)
        if n is not None and n.upper and n.entries is not None:
            return _RowObjects(self.tree, at)
        return objectdir.own_files(self.tree.lower.session)

    def _need(self, path: str) -> Node:
        n = self._resolve(path)
        if n is None:
            raise FileNotFoundError(path)
        return n


class _NodeReader(io.RawIOBase):
    """A file of the view read through the tree, from the start: the session's bytes where
    it wrote, the worktree's elsewhere."""

    def __init__(self, tree: Tree, node: Node) -> None:
        self.tree = tree
        self.node = node
        self.offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.tree.read(self.node, self.offset, len(buffer))
        buffer[: len(data)] = data
        self.offset += len(data)
        return len(data)


class _RowObjects:
    """A session's own object files kept as rows below `at` (before `objectdir.py`)."""

    def __init__(self, tree: Tree, at: bytes) -> None:
        self.tree = tree
        self.at = at

    def _own_entries(self, rel: bytes) -> dict[bytes, Node]:
        d = self.tree.resolve(self.at + (b"/" + rel if rel else b""))
        if d is None or not d.upper or d.entries is None:
            return {}
        out = {}
        for name, ino in d.entries.items():
            n = self.tree.nodes.get(ino) if ino else None
            if n is not None and n.upper:
                out[name] = n
        return out

    def own_loose_objects(self) -> list[str]:
        ids = []
        for fan, d in self._own_entries(b"").items():
            if len(fan) == 2 and d.is_dir:
                for name, n in self._own_entries(fan).items():
                    if stat.S_ISREG(n.mode) and len(name) == 38:
                        ids.append((fan + name).decode("ascii", "replace"))
        return ids

    def own_packs(self) -> list[str]:
        return objectdir.packs_in(self._own_entries(b"pack"))

    def _own_file(self, rel: str) -> Node | None:
        n = self.tree.resolve(self.at + b"/" + os.fsencode(rel))
        return n if n is not None and n.upper and stat.S_ISREG(n.mode) else None

    def read_object_file(self, rel: str) -> bytes | None:
        n = self._own_file(rel)
        return None if n is None else self.tree.read_whole(n)

    def copy_object_file(self, rel: str, dest: str) -> None:
        n = self._own_file(rel)
        if n is None:
            raise FileNotFoundError(rel)
        self.tree.opened(n)
        try:
            with open(dest, "wb") as out:
                reader = _NodeReader(self.tree, n)
                while chunk := reader.read(READ_CHUNK):
                    out.write(chunk)
        finally:
            self.tree.released(n)
