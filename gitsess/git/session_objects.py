"""A session's own objects: what git inside the session wrote into its copy-on-write object
store (loose objects, packs), read back for the commands that look at its commits, and the
objects a set of its commits needs that a repository lacks (what a promotion copies in).

The session's object store is a directory of its own that borrows the real one
(`overlay/objectdir.py`); only its own files are read here (the real ones the real repository
reads itself). Loose objects are read one by one as libgit2 asks for them, each checked against
its id (a run may have put other bytes under its name); the session's packs, when it has any,
are copied out once, on the first object that no loose one and no real store holds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import pygit2
from pygit2.enums import ObjectType

_KINDS = {b"commit": ObjectType.COMMIT, b"tree": ObjectType.TREE, b"blob": ObjectType.BLOB}
_KINDS[b"tag"] = ObjectType.TAG
_NAMES = {kind: name for name, kind in _KINDS.items()}

Entry = tuple[pygit2.Oid, int, bytes]  # id, object type, content (as `packwrite.Entry`)


class ObjectFiles(Protocol):
    """A session's object store, its own files only (paths relative to the store)."""

    def own_loose_objects(self) -> list[str]:
        """Hex ids of the loose objects the session wrote itself."""
        ...

    def own_packs(self) -> list[str]:
        """Paths (`pack/pack-<id>`, no suffix) of the packs the session wrote itself, with
        their index."""
        ...

    def read_object_file(self, rel: str) -> bytes | None:
        """The bytes of a file of the session's own; None if it has none there."""
        ...

    def copy_object_file(self, rel: str, dest: str) -> None:
        """Write a file of the session's own to `dest` (a path outside the view)."""
        ...


class SessionObjects(pygit2.OdbBackend):
    """The session's own objects, as an object database backend (read only)."""

    def __init__(self, files: ObjectFiles) -> None:
        super().__init__()
        self._files = files
        self._loose: list[str] | None = None
        self._packs: pygit2.OdbBackendPack | None = None
        self._tmp: str | None = None

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _read_loose(self, oid: pygit2.Oid) -> tuple[int, bytes] | None:
        hex_id = str(oid)
        raw = self._files.read_object_file(f"{hex_id[:2]}/{hex_id[2:]}")
        return None if raw is None else parse_loose(raw)

    def _pack_store(self) -> pygit2.OdbBackendPack | None:
        if self._packs is None:
            packs = self._files.own_packs()
            if not packs:
                return None
            self._tmp = tempfile.mkdtemp(prefix="gitsess-objects-")
            os.mkdir(os.path.join(self._tmp, "pack"))
            for pack in packs:
                for suffix in (".pack", ".idx"):
                    dest = os.path.join(self._tmp, pack + suffix)
                    self._files.copy_object_file(pack + suffix, dest)
            self._packs = pygit2.OdbBackendPack(self._tmp)
        return self._packs

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        found = self._read_loose(oid)
        if found is None:
            packs = self._pack_store()
            if packs is None:
                raise KeyError(oid)
            kind, data = packs.read(oid)
            found = int(kind), data
        # The files are a run's to write: an object under another's name (which libgit2 does
        # not check for a backend of its own) would be promoted as the one it is not, and the
        # real repository left without the object its new commits name.
        if object_id(*found) != str(oid):  # (an Oid, or a hex id from the prefix reads)
            raise KeyError(f"{oid}: the session's file holds another object")
        return found

    def read_prefix_cb(self, oid: pygit2.Oid) -> tuple[int, bytes, pygit2.Oid]:
        full = self.exists_prefix_cb(oid)
        kind, data = self.read_cb(full)
        return kind, data, full

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self.read_cb(oid)
        return kind, len(data)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        try:
            self.read_cb(oid)
        except KeyError:
            return False
        return True

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        # libgit2 passes a prefix as an id padded with zeros; a full id is the common case
        if self.exists_cb(oid):
            return oid
        prefix = str(oid).rstrip("0")
        for known in self:
            if str(known).startswith(prefix):
                return known
        raise KeyError(oid)

    def refresh_cb(self) -> None:
        self._loose = None

    def __iter__(self) -> Iterator[pygit2.Oid]:
        if self._loose is None:
            self._loose = self._files.own_loose_objects()
        ids = [pygit2.Oid(hex=h) for h in self._loose]
        packs = self._pack_store()
        return iter([*ids, *(packs if packs is not None else ())])


def parse_loose(raw: bytes) -> tuple[int, bytes]:
    """(type, content) of a loose object file's bytes."""
    try:
        body = zlib.decompress(raw)
    except zlib.error as e:
        raise KeyError(f"damaged loose object: {e}") from None
    header, _, data = body.partition(b"\0")
    name, _, size = header.partition(b" ")
    if name not in _KINDS or not size.isdigit() or int(size) != len(data):
        raise KeyError("damaged loose object")
    return _KINDS[name], data


def object_id(kind: int, data: bytes) -> str:
    """The (hex) id of the object (type, content)."""
    return hashlib.sha1(_NAMES[ObjectType(kind)] + b" %d\0" % len(data) + data).hexdigest()


def needed_objects(
    repo: pygit2.Repository, commits: Sequence[str], have: Callable[[pygit2.Oid], bool]
) -> list[Entry]:
    """`commits` and every tree and blob they reach that `have` says are missing, read from
    `repo`: what a repository holding exactly `have` needs for them. A tree `have` holds is
    taken as whole there (a repository holds what its objects reach). Parents outside
    `commits` are not followed."""
    out: list[Entry] = []
    seen: set[pygit2.Oid] = set()
    pending = [pygit2.Oid(hex=c) for c in commits]
    while pending:
        oid = pending.pop()
        if oid in seen or have(oid):
            continue
        seen.add(oid)
        raw_kind, data = repo.odb.read(oid)
        kind = int(raw_kind)
        if kind == ObjectType.COMMIT:
            pending.append(repo[oid].peel(pygit2.Commit).tree_id)
        elif kind == ObjectType.TREE:
            # (a submodule's commit is not an object of this repository)
            tree = repo[oid].peel(pygit2.Tree)
            pending.extend(e.id for e in tree if e.type != ObjectType.COMMIT)
        elif kind == ObjectType.TAG:
            pending.append(repo[oid].peel(pygit2.Tag).target)
        out.append((oid, kind, data))
    return out


def tree_objects(repo: pygit2.Repository, commit: str | None) -> set[pygit2.Oid]:
    """Every tree and blob of `commit`'s tree (none for None)."""
    if commit is None:
        return set()
    tree = repo[commit].peel(pygit2.Tree)
    found = {tree.id}
    pending = [tree]
    while pending:
        for entry in pending.pop():
            if entry.id in found or entry.type == ObjectType.COMMIT:
                continue
            found.add(entry.id)
            if entry.type == ObjectType.TREE:
                sub = repo[entry.id]
                assert isinstance(sub, pygit2.Tree)
                pending.append(sub)
    return found
