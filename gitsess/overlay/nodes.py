"""The nodes of the merged view (`tree.py`): what one holds, what getattr answers of it, and
what a commit of the tree still has to write.

Two kinds of node live here. Lower nodes are objects of the worktree the session has not
touched: nothing about them is stored, their inode number is the worktree's own, and their
attributes are read from disk on demand. Upper nodes are objects the session created or
changed: their metadata is held in memory and persisted in delta.db through `DeltaStore`, their
file contents are written straight into data files beside it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from gitsess.overlay.delta import NodeRow

ROOT_INODE = 1  # what FUSE calls the root


class Node:
    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "data",
        "entries",
        "gid",
        "ino",
        "lookups",
        "lower",
        "mode",
        "mtime_ns",
        "name",
        "nlink",
        "opens",
        "origin",
        "origin_stamp",
        "parent",
        "quiet_since",
        "rdev",
        "sealed",
        "size",
        "st",
        "subdirs",
        "target",
        "uid",
        "upper",
        "version",
        "xattrs",
    )

    def __init__(self, ino: int, parent: int, name: bytes) -> None:
        self.ino = ino
        self.upper = False
        self.lower: bytes | None = None  # lower path (relative) of a lower node
        # A hidden path (the state dir): found by name, so that `gitsess run` can bind the real
        # one over it, but never listed, never changed, and empty in the view.
        self.sealed = False
        self.parent = parent
        self.name = name
        self.mode = 0
        self.uid = 0
        self.gid = 0
        self.rdev = 0
        self.size = 0
        self.atime_ns = 0
        self.mtime_ns = 0
        self.ctime_ns = 0
        self.nlink = 1
        self.origin: bytes | None = None
        self.data = 1
        # A symlink's target: an upper one's own; of a lower one, the last read (the kernel's).
        self.target: bytes | None = None
        self.origin_stamp: tuple[int, int, int] | None = None  # mode, size, mtime_ns
        self.entries: dict[bytes, int] | None = None
        self.lookups = 0
        self.opens = 0
        self.xattrs: dict[bytes, bytes] | None = None
        self.quiet_since = 0
        # The lstat taken by the lookup that found a lower node, for the getattr that follows.
        self.st: os.stat_result | None = None
        # Subdirectories of an upper directory, counted when first needed (st_nlink).
        self.subdirs: int | None = None
        # Of a lower file below `.git`: the real file it was found as (`identity`), whose pages
        # the kernel may hold; a name found to be another file gets a new node.
        self.version: tuple[int, int, int, int] | None = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def worktree_rel(self) -> bytes | None:
        """The worktree path whose object this node shows (a directory's merged entries, a
        file's content until it has data of its own), None if none."""
        return self.origin if self.upper else self.lower

    def row(self) -> NodeRow:
        om, osz, omt = self.origin_stamp or (None, None, None)
        return NodeRow(
            self.ino,
            self.mode,
            self.uid,
            self.gid,
            self.rdev,
            self.size,
            self.atime_ns,
            self.mtime_ns,
            self.ctime_ns,
            self.nlink,
            self.origin,
            self.data,
            self.target,
            om,
            osz,
            omt,
        )


@dataclass
class Attr:
    """What getattr answers; the FUSE adapter copies it into EntryAttributes."""

    ino: int
    mode: int
    nlink: int
    uid: int
    gid: int
    rdev: int
    size: int
    blocks: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


class Pending:
    """What the next commit writes (`NodeTable.commit`); every part of `Tree` adds to it."""

    def __init__(self) -> None:
        self.reset({})

    def reset(self, dentries: dict[tuple[int, bytes], int | None]) -> None:
        """Nothing pending but `dentries` (after a commit: whiteouts held for a later one).
        In place, as every part of the tree holds this object."""
        self.deleted: set[int] = set()
        # deleted nodes with a data file to unlink once the commit lands (the others have none)
        self.data_files: set[int] = set()
        self.emptied: set[int] = set()  # directories removed while the kernel still holds them
        self.nodes: set[int] = set()
        self.dentries = dentries
        self.xattrs: dict[tuple[int, bytes], bytes | None] = {}
        self.meta: dict[str, int | str] = {}
        self.drift: dict[str, int] = {}
        self.undrift: set[str] = set()
        self.inline: dict[int, bytes | None] = {}  # see Batch.inline

    def any(self) -> bool:
        return bool(
            self.deleted
            or self.nodes
            or self.dentries
            or self.xattrs
            or self.meta
            or self.drift
            or self.undrift
            or self.inline
        )


def err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def join(base: bytes, name: bytes) -> bytes:
    return base + b"/" + name if base else name


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """Which file a real file below `.git` is now: git replaces them by renames (a new inode),
    and a rewrite in place changes the size or the times."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def stamp(st: os.stat_result | None) -> tuple[int, int, int] | None:
    """What a copy-up records of its worktree original, to tell later whether it changed."""
    return None if st is None else (st.st_mode, st.st_size, st.st_mtime_ns)
