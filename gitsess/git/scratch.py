"""A scratch object database: a repository object over the real repository's objects whose new
objects stay in memory, for the blobs and trees of a diff or of a commit being planned.

The memory backend is asked before the real packs and loose objects, and it also keeps the
bytes of blobs the real repository already had as they are hashed (the worktree side's too),
so a diff reads both sides from memory, never inflating a blob from a pack. Files past
`BIG_FILE` are never held whole: they are hashed in parts and streamed into the real store as
loose objects (`store_big`), and a diff shows them as binary.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import BinaryIO, cast

import pygit2
from pygit2.enums import ObjectType

from gitsess.git.blobid import blob_id
from gitsess.git.repo import common_dir
from gitsess.git.session_objects import ObjectFiles, SessionObjects

# Files past this size are diffed as git diffs those past core.bigFileThreshold: as binary,
# named by their ids, and never held in memory (git's threshold is 512 MiB; this one bounds
# the memory a diff or a patch takes, whatever the files' sizes).
BIG_FILE = 16 << 20


@dataclass(frozen=True)
class BigFile:
    """A file past `BIG_FILE`: read in parts, never whole."""

    path: str
    oid: str
    size: int
    open: Callable[[], AbstractContextManager[BinaryIO]]


class _MemoryBackend(pygit2.OdbBackend):
    """Objects kept in a dict: writing a loose object costs a file (and a pack-directory
    rescan on every miss of the real repository's packs); this costs a dict insert.

    `objects` are those made here; `kept` are blobs the real repository has too, whose bytes
    were at hand: libgit2 reads them from here rather than inflating them from a pack."""

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
        self.kept: dict[pygit2.Oid, bytes] = {}

    def _get(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        made = self.objects.get(oid)
        return made if made is not None else (ObjectType.BLOB, self.kept[oid])

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self._get(oid)

    def read_prefix_cb(self, oid: pygit2.Oid) -> tuple[int, bytes, pygit2.Oid]:
        full = self.exists_prefix_cb(oid)
        kind, data = self._get(full)
        return kind, data, full

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self._get(oid)
        return kind, len(data)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return oid in self.objects or oid in self.kept

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        # libgit2 passes a prefix as an id padded with zeros; a full id is the common case
        if oid in self.objects or oid in self.kept:
            return oid
        prefix = str(oid).rstrip("0")
        for known in (*self.objects, *self.kept):
            if str(known).startswith(prefix):
                return known
        raise KeyError(oid)

    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        self.objects[oid] = (kind, data)

    def refresh_cb(self) -> None:
        pass

    def __iter__(self) -> Iterator[pygit2.Oid]:
        return iter(list(self.objects))


class ScratchRepository(pygit2.Repository):
    """A repository object that reads a real repository's objects (and a session's own, when
    given) and keeps new ones in memory. Blobs and trees of a diff (or of a commit being
    planned) go there, never into the real repository."""

    def __init__(self, repo: pygit2.Repository, own: ObjectFiles | None = None) -> None:
        super().__init__()
        self._memory = _MemoryBackend()
        objects = str(common_dir(repo) / "objects")
        odb = pygit2.Odb()
        # Asked first: libgit2 gives the real repository's packs priority 2 (an alternate wins
        # a tie) and its loose objects 1; a diff would otherwise inflate blobs kept here.
        odb.add_backend(self._memory, 3)
        odb.add_disk_alternate(objects)
        # Asked last: most objects a session reads are the real repository's.
        self._own = SessionObjects(own) if own is not None else None
        if self._own is not None:
            odb.add_backend(self._own, 0)
        self.set_odb(odb)
        # The real repository's stores, asked directly whether they hold a blob: asked through
        # the odb, each miss (every new blob) first rescans the pack directory.
        self._real = (pygit2.OdbBackendPack(objects), pygit2.OdbBackendLoose(objects, 0, False))
        self._real_path = repo.path

    def close_own(self) -> None:
        if self._own is not None:
            self._own.close()

    def in_real(self, oid: pygit2.Oid) -> bool:
        """Whether the real repository's object store holds `oid`."""
        pack, loose = self._real
        return bool(pack.exists(oid) or loose.exists(oid))

    def store_big(self, stream: BinaryIO) -> pygit2.Oid:
        """A blob too big to hold (`BIG_FILE`), written to the real repository's object store
        as it is read: through this repository's memory store, libgit2 would buffer it whole.
        Should no commit come to use it, `git gc` prunes it as any unreferenced object."""
        # pygit2 reads any binary file object; its stub asks for io.IOBase, which BinaryIO is not.
        return pygit2.Repository(self._real_path).create_blob_fromiobase(cast(io.IOBase, stream))

    def create_blob(self, data: str | bytes) -> pygit2.Oid:
        """A new blob goes to memory. The bytes of one the real repository already has are
        kept too: a commit that writes the blob into the worktree then reads neither the
        session's file again nor the object store (inflating it)."""
        raw = data.encode() if isinstance(data, str) else data
        oid = blob_id(raw)
        if oid not in self._memory.objects and oid not in self._memory.kept:
            if self.in_real(oid):
                self._memory.kept[oid] = raw
            else:
                self._memory.objects[oid] = (ObjectType.BLOB, raw)
        return oid

    def created(self, oid: pygit2.Oid) -> tuple[int, bytes] | None:
        """(type, content) of an object made here; None for one the real repository has
        (libgit2 writes no object that one of the odb's backends already holds).

        Read straight from memory: through libgit2 every read is a call back into Python."""
        return self._memory.objects.get(oid)

    def blob_data(self, oid: pygit2.Oid) -> bytes | None:
        """The content of a blob made or kept here (see `create_blob`), from memory."""
        made = self._memory.objects.get(oid)
        return made[1] if made is not None else self._memory.kept.get(oid)


@contextmanager
def scratch_repo(
    repo: pygit2.Repository, own: ObjectFiles | None = None
) -> Iterator[ScratchRepository]:
    """A `ScratchRepository` over `repo` (and the session objects `own`), dropped with what it
    holds on exit."""
    scratch = ScratchRepository(repo, own)
    try:
        yield scratch
    finally:
        scratch.close_own()
