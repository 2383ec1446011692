"""What the git layer needs to know about a session's view.

The overlay implements this by reading delta.db and the lower worktree directly, so diff and
apply work whether or not the session is mounted, and never walk the whole view.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import BinaryIO, Literal, NamedTuple, Protocol

Kind = Literal["file", "dir", "symlink", "other"]


def kind_of(mode: int) -> Kind:
    """The kind of an `st_mode`."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


@dataclass(frozen=True)
class Entry:
    """One path of the view as `lstat` would describe it."""

    kind: Kind
    mode: int  # full st_mode, type bits included
    size: int
    mtime_ns: int


class _Stated(Protocol):
    @property
    def mode(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime_ns(self) -> int: ...


class Stamp(NamedTuple):
    """A path's state as kept to tell later whether it was written to since: its full st_mode
    (type bits, so its kind, included), size and mtime. The one shape of it: an apply's and a
    discard's `expect`, the drop request and `AppliedPaths.drop`, `tracking.Settled`; a
    copy-up's record of its original (`overlay/nodes.stamp`, on the lookup path) is the same
    three as a plain tuple, which compares equal. As JSON it is [mode, size, mtime_ns] (the
    apply journal's file puts the kind first, as it always did)."""

    mode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, entry: _Stated | None) -> Stamp | None:
        return None if entry is None else cls(entry.mode, entry.size, entry.mtime_ns)


class SessionView(Protocol):
    """A session's merged view (worktree + delta), addressed by repository-relative POSIX paths.

    Paths have no leading slash; "" is the worktree root. The `.git` entry is never reported.
    """

    def touched_paths(self) -> Iterable[str]:
        """A superset of the paths whose view differs from the real worktree.

        A touched directory (deleted, renamed away, replaced, newly created) stands for its whole
        subtree: compare both sides below it. Untouched paths are identical to the worktree.
        """
        ...

    def entry(self, path: str) -> Entry | None:
        """The path in the view, or None when it does not exist there."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether the path is a directory in the view: `entry` answers that too, but a
        directory's entry counts its subdirectories (its link count), a listing of each."""
        ...

    def read(self, path: str) -> bytes:
        """Content of a regular file in the view."""
        ...

    def open(self, path: str) -> AbstractContextManager[BinaryIO]:
        """A regular file of the view to read in parts: one too big to hold in memory."""
        ...

    def readlink(self, path: str) -> str:
        """Target of a symlink in the view."""
        ...

    def listdir(self, path: str) -> list[str]:
        """Names in a directory of the view, sorted."""
        ...

    def removed_at(self, path: str) -> int | None:
        """When the session last removed the path (or renamed it away or another file over it),
        in ns since the epoch; None when that is not known."""
        ...

    def copied_from(self, path: str) -> Entry | None:
        """The worktree file as it was when the session first changed this path.

        None when the session created the path or has not changed it. Apply compares it with the
        worktree's current file to refuse overwriting an edit made outside the session.
        """
        ...
