"""A session's files read without mounting it: `gitsess fs ls|stat|cat`.

Files are read through `SessionHandle.view` (delta.db + the worktree), so this works for
supervisors, scripts, and machines without FUSE, and beside a live daemon.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext
from gitsess.services.handle import SessionHandle
from gitsess.store.registry import Session

if TYPE_CHECKING:
    from gitsess.git.view import Entry, Kind
    from gitsess.overlay.view import OverlayView

# Like the kernel's ELOOP limit.
MAX_SYMLINKS = 40


@dataclass(frozen=True)
class FsEntry:
    path: str  # relative to the worktree root; "" is the root
    kind: Kind
    mode: int
    size: int
    mtime_ns: int
    changed: bool  # the session changed it, or something below it
    link: str | None  # a symlink's target

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)


@dataclass(frozen=True)
class FsStat:
    entry: FsEntry
    # What the worktree had when the session first changed it (None: new in the session, or
    # unchanged, or only metadata changed).
    copied_from: Entry | None


def normalize(session: Session, path: str) -> str:
    """A path of the view, relative to its root: absolute inside the worktree, or relative."""
    if os.path.isabs(path):
        try:
            path = str(Path(path).relative_to(session.worktree))
        except ValueError:
            raise GitsessError(
                f"{path} is outside the worktree of session {session.name}"
            ) from None
    norm = posixpath.normpath(path)
    if norm == ".":
        return ""
    if norm == ".." or norm.startswith("../"):
        raise GitsessError(f"{path} is outside the worktree of session {session.name}")
    return norm


class Changes:
    """Which paths the session touched, and which directories hold something it touched."""

    def __init__(self, view: OverlayView) -> None:
        self.touched = set(view.touched_paths())
        self.holding = {a for t in self.touched for a in _ancestors(t)}
        if self.touched:
            self.holding.add("")

    def inside(self, path: str) -> bool:
        """The session holds this path: it touched it, or a directory above it."""
        return path in self.touched or any(a in self.touched for a in _ancestors(path))

    def changed(self, path: str) -> bool:
        return path in self.holding or self.inside(path)


def _ancestors(path: str) -> list[str]:
    """The directories above `path`, outermost first: for a/b/c, a and a/b."""
    return [path[:i] for i, c in enumerate(path) if c == "/"]


def _entry(view: OverlayView, changes: Changes, path: str) -> FsEntry | None:
    e = view.entry(path)
    if e is None:
        return None
    link = view.readlink(path) if e.kind == "symlink" else None
    return FsEntry(path, e.kind, e.mode, e.size, e.mtime_ns, changes.changed(path), link)


def _missing(session: Session, path: str) -> GitsessError:
    return GitsessError(f"session {session.name} has no {path or '.'}")


def ls(ctx: RepoContext, session: Session, path: str = "") -> list[FsEntry]:
    """A directory's entries in name order; a file (or symlink) is listed alone."""
    rel = normalize(session, path)
    with SessionHandle(ctx, session).view() as view:
        changes = Changes(view)
        top = _entry(view, changes, rel)
        if top is None:
            raise _missing(session, rel)
        if top.kind != "dir":
            return [top]
        found = [_entry(view, changes, posixpath.join(rel, name)) for name in view.listdir(rel)]
    return [e for e in found if e is not None]


def stat(ctx: RepoContext, session: Session, path: str) -> FsStat:
    rel = normalize(session, path)
    with SessionHandle(ctx, session).view() as view:
        entry = _entry(view, Changes(view), rel)
        if entry is None:
            raise _missing(session, rel)
        return FsStat(entry, view.copied_from(rel))


def cat(ctx: RepoContext, session: Session, path: str, at: int | None = None) -> bytes:
    """A file's content in the view (at checkpoint `at`), following symlinks that stay
    inside it."""
    rel = normalize(session, path)
    with SessionHandle(ctx, session).view(at=at) as view:
        for _ in range(MAX_SYMLINKS):
            e = view.entry(rel)
            if e is None:
                raise _missing(session, rel)
            if e.kind == "dir":
                raise GitsessError(f"{rel or '.'} is a directory (gitsess fs ls lists it)")
            if e.kind != "symlink":
                return view.read(rel)
            target = view.readlink(rel)
            try:
                rel = normalize(session, posixpath.join(posixpath.dirname(rel), target))
            except GitsessError:
                raise GitsessError(
                    f"{rel} is a symlink to {target}, outside the session's view"
                ) from None
    raise GitsessError(f"{path}: too many levels of symbolic links")
