"""What a session changed: the real worktree against the session's view, path by path.

Only the view's touched paths are walked (a touched directory stands for its subtree), so the
cost follows the size of the session's change, not the size of the worktree. Content is compared
by git blob id, so a file that was copied up but is byte-identical is not a change. It compares
with the real worktree, not the base commit: `diff` shows what `apply --worktree` would write.

The change set keeps everything the filesystem can tell apart (permission bits, empty
directories), because `apply --worktree` reproduces those; diff, patch and commit look only at
what git can hold (`Change.git_visible`). Devices, fifos and sockets are no change but
`ChangeSet.special`, and a directory holding a `.git` of its own (a repository made inside, a
submodule's checkout) is one entry of `ChangeSet.repos`, never its files: no apply writes it,
as git leaves it alone. Parents' kinds are asked with `SessionView.is_dir`, once per directory
and side, not with an entry (a merged directory's entry lists it to count subdirectories).
File names are bytes end to end: str with os.fsdecode's surrogates in Python, bytes wherever
text must be UTF-8.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import pygit2

from gitsess import progress
from gitsess.errors import GitsessError
from gitsess.git import dotgit
from gitsess.git.blobid import blob_id, file_blob_id, stream_blob_id
from gitsess.git.ignore import Ignore, join_path, parent_path
from gitsess.git.pathspec import Pathspec
from gitsess.git.view import Entry, SessionView

StateKind = Literal["file", "symlink", "dir"]

GIT_FILE = 0o100644
GIT_EXEC = 0o100755
GIT_LINK = 0o120000

# Larger view files are hashed but not kept in a `store`: an ignored build artifact of gigabytes
# must not sit in memory; diff and commit read such a file again if they need it.
KEEP_LIMIT = 1 << 20


@dataclass(frozen=True)
class Side:
    """One side of a changed path. `oid` is the git blob id of the content (of the link target
    for a symlink); None for a directory."""

    kind: StateKind
    mode: int  # full st_mode
    size: int
    mtime_ns: int
    oid: str | None

    @property
    def perm(self) -> int:
        return stat.S_IMODE(self.mode)

    @property
    def git_mode(self) -> int | None:
        """The mode git would record, None for a directory (git has no empty trees)."""
        if self.kind == "symlink":
            return GIT_LINK
        if self.kind == "file":
            # git keeps only the owner's execute bit, as `git add` does
            return GIT_EXEC if self.mode & stat.S_IXUSR else GIT_FILE
        return None

    def git_entry(self) -> tuple[str, int] | None:
        mode = self.git_mode
        if mode is None or self.oid is None:
            return None
        return self.oid, mode


@dataclass(frozen=True)
class Change:
    """`old` is the real worktree now, `new` the session's view; None where the path is absent."""

    path: str
    old: Side | None
    new: Side | None

    @property
    def git_old(self) -> tuple[str, int] | None:
        return self.old.git_entry() if self.old else None

    @property
    def git_new(self) -> tuple[str, int] | None:
        return self.new.git_entry() if self.new else None

    @property
    def git_visible(self) -> bool:
        """Whether git sees this change (content, type or execute bit of a file or symlink)."""
        return self.git_old != self.git_new


@dataclass(frozen=True)
class ChangeSet:
    """The selected changes, sorted by path, and the paths that differ but were left out (by
    pathspec, or by .gitignore for untracked paths). An excluded directory stands for its
    subtree."""

    changes: tuple[Change, ...]
    excluded: tuple[str, ...] = ()
    # Devices, fifos and sockets of the session's (not the worktree's), and `repos`: no change
    # git can hold nor apply write, so they stay in the session.
    special: tuple[str, ...] = ()
    # Of `special`: directories holding a repository of their own (a `.git`), which git shows
    # as one untracked directory (or a gitlink) and never as content, and names git refuses
    # (`.GIT`, `git~1`, ...: `dotgit.is_dotgit`). Never written through, never deleted.
    repos: tuple[str, ...] = ()

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.changes]

    def git_changes(self) -> list[Change]:
        return [c for c in self.changes if c.git_visible]


def compute_changes(
    view: SessionView,
    repo: pygit2.Repository,
    *,
    pathspecs: Sequence[str] = (),
    include_ignored: bool = False,
    store: pygit2.Repository | None = None,
) -> ChangeSet:
    """Compare the view with the real worktree of `repo` (opened on the session's worktree).

    Untracked paths that .gitignore (as the view sees it), `info/exclude` or `core.excludesFile`
    ignores are left out unless `include_ignored`; tracked paths (in the worktree's index) never
    are, as in git. `store`, a scratch repository (`diff.scratch_repo`), keeps the blobs of both
    sides' files (up to `KEEP_LIMIT` bytes) as they are hashed, so that a diff or a commit made
    with the same scratch repository reads them neither from the view nor from the object store.
    """
    if repo.workdir is None:
        raise GitsessError(f"{repo.path} has no worktree to compare a session with")
    spec = Pathspec(pathspecs)
    tracked = _Tracked(repo.index)
    ignore = None if include_ignored else Ignore(view, repo, tracked)
    walker = _Walker(view, Path(repo.workdir), spec, ignore, store)
    for path in touched_roots(view.touched_paths()):
        walker.start(path)
    return ChangeSet(
        tuple(sorted(walker.changes, key=lambda c: c.path)),
        tuple(sorted(walker.excluded)),
        tuple(sorted([*walker.special, *walker.repos])),
        tuple(sorted(walker.repos)),
    )


def touched_roots(touched: Iterable[str]) -> list[str]:
    """Touched paths with those under another touched path dropped (that one covers them)."""
    roots: set[str] = set()
    for path in sorted({p.strip("/") for p in touched}, key=lambda p: (p.count("/"), p)):
        if path == "":
            return [""]  # the whole tree
        parts = path.split("/")
        if not any("/".join(parts[:depth]) in roots for depth in range(1, len(parts))):
            roots.add(path)
    return sorted(roots)


class _Walker:
    """Walks both sides below each touched path and collects the differences."""

    def __init__(
        self,
        view: SessionView,
        root: Path,
        spec: Pathspec,
        ignore: Ignore | None,
        store: pygit2.Repository | None,
    ) -> None:
        self.view = view
        self.store = store
        self._prefix = f"{root}/"  # str concatenation: a Path per lstat costs more than the call
        self.spec = spec
        self.ignore = ignore
        self.changes: list[Change] = []
        self.excluded: set[str] = set()
        self.special: list[str] = []
        self.repos: list[str] = []
        self._holds_git: dict[str, bool] = {}
        # Whether a path and every path above it are directories, on each side: every touched
        # path asks about its parent, and n files in one directory would ask n times.
        self._real_dirs: dict[str, bool] = {"": True}
        self._view_dirs: dict[str, bool] = {"": True}

    def start(self, path: str) -> None:
        if not self.spec.may_match_within(path):
            self.excluded.add(path)
            return
        if path == "":
            self._children("", True, True)
            return
        parts = path.split("/")
        if ".git" in parts:
            return  # git's own files (or a nested repository's: its directory says so)
        refused = next((i for i, part in enumerate(parts) if dotgit.is_dotgit(part)), None)
        if refused is not None:
            # a name git refuses in a directory the session merged in place (`_children` names
            # those of a directory it walks): named, never taken
            named = "/".join(parts[: refused + 1])
            if named not in self.repos:
                self.repos.append(named)
            return
        for depth in range(1, len(parts)):
            above = "/".join(parts[:depth])
            if self._repository(
                above, self._real_dirs_down_to(above), self._view_dirs_down_to(above)
            ):
                if above not in self.repos:
                    self.repos.append(above)
                return
        # lstat would follow a symlink standing where a parent directory should be
        parent = parent_path(path)
        old = self._real(path) if self._real_dirs_down_to(parent) else None
        new = self._view(path) if self._view_dirs_down_to(parent) else None
        self._visit(path, old, new)

    def _real_dirs_down_to(self, path: str) -> bool:
        known = self._real_dirs.get(path)
        if known is None:
            above = self._real_dirs_down_to(parent_path(path))
            st = self._lstat(path) if above else None
            known = self._real_dirs[path] = st is not None and stat.S_ISDIR(st.st_mode)
        return known

    def _view_dirs_down_to(self, path: str) -> bool:
        known = self._view_dirs.get(path)
        if known is None:
            above = self._view_dirs_down_to(parent_path(path))
            known = self._view_dirs[path] = above and self.view.is_dir(path)
        return known

    def _visit(self, path: str, old: Side | None, new: Side | None) -> None:
        old_dir = old is not None and old.kind == "dir"
        new_dir = new is not None and new.kind == "dir"
        differs = _differs(old, new)
        if not differs and not (old_dir or new_dir):
            return
        if self.ignore is not None and self.ignore.ignored(path, new_dir if new else old_dir):
            self.excluded.add(path)  # an ignored directory may hide differences below it
            if old_dir and new is not None and not new_dir:
                # An ignored file where a directory was: the file stays in the session, and
                # the tracked files the directory held are gone all the same (git stages
                # their removal and leaves the file out).
                self._children(path, True, False)
            return
        found = len(self.changes), len(self.special), len(self.repos)
        if differs:
            if self.spec.matches(path):
                self.changes.append(Change(path, old, new))
            else:
                self.excluded.add(path)
        if old_dir or new_dir:
            if not self.spec.may_match_within(path):
                self.excluded.add(path)
                return
            self._children(path, old_dir, new_dir)
            if self._repository(path, old_dir, new_dir):
                # what changed in it is the nested repository's, never this one's content
                now = len(self.changes), len(self.special), len(self.repos)
                del self.changes[found[0] :], self.special[found[1] :], self.repos[found[2] :]
                if now != found:
                    self.repos.append(path)

    def _repository(self, path: str, old_dir: bool, new_dir: bool) -> bool:
        """Whether directory `path` holds a `.git` of its own, on a side where it is a
        directory (on the other, `path/.git` would be looked up through what is there)."""
        known = self._holds_git.get(path)
        if known is None:
            git = join_path(path, ".git")
            known = (old_dir and self._lstat(git) is not None) or (
                new_dir and self.view.entry(git) is not None
            )
            self._holds_git[path] = known
        return known

    def _children(self, path: str, old_dir: bool, new_dir: bool) -> None:
        real = set(self._listdir(path)) if old_dir else set()
        seen = set(self.view.listdir(path)) if new_dir else set()
        for name in sorted(real | seen):
            if name == ".git":
                continue  # git's own directory (or an embedded repository's) is never content
            child = join_path(path, name)
            if dotgit.is_dotgit(name):
                if (name in real) != (name in seen):
                    self.repos.append(child)  # named, never taken: as `git add` refuses it
                continue
            old = self._real(child) if name in real else None
            new = self._view(child) if name in seen else None
            self._visit(child, old, new)

    def _listdir(self, path: str) -> list[str]:
        try:
            with os.scandir(self._prefix + path) as entries:
                return [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _lstat(self, path: str) -> os.stat_result | None:
        try:
            return os.lstat(self._prefix + path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _real(self, path: str) -> Side | None:
        st = self._lstat(path)
        if st is None:
            return None
        full = self._prefix + path
        if stat.S_ISREG(st.st_mode):
            kind: StateKind = "file"
            oid: str | None = self._real_file(full, st.st_size)
        elif stat.S_ISLNK(st.st_mode):
            kind, oid = "symlink", str(blob_id(os.fsencode(os.readlink(full))))
        elif stat.S_ISDIR(st.st_mode):
            kind, oid = "dir", None
        else:
            return None  # sockets, fifos, devices: git does not track them
        return Side(kind, st.st_mode, st.st_size, st.st_mtime_ns, oid)

    def _real_file(self, full: str, size: int) -> str:
        """Kept in `store` as well: a diff then reads the old side from memory, not the
        object store (where a tracked file's blob is usually deflated, often a delta)."""
        if self.store is None or size > KEEP_LIMIT:
            return str(file_blob_id(full))
        with open(full, "rb") as f:
            # a read of KEEP_LIMIT would allocate (and fault in) a buffer that big per file
            data = f.read(size + 1)
        if len(data) > size:  # grown since its lstat: perhaps past the limit
            return str(file_blob_id(full))
        return str(self.store.create_blob(data))

    def _view(self, path: str) -> Side | None:
        entry = self.view.entry(path)
        if entry is None:
            return None
        if entry.kind == "file":
            if entry.size > KEEP_LIMIT:
                # Hashed in parts: a file of any size costs a buffer, not its size in memory.
                with (
                    self.view.open(path) as f,
                    progress.reading(f, f"hashing {path}", entry.size) as read,
                ):
                    return _from_entry(entry, "file", stream_blob_id(read, entry.size, path))
            data = self.view.read(path)
            if self.store is not None:
                return _from_entry(entry, "file", self.store.create_blob(data))
            return _from_entry(entry, "file", blob_id(data))
        if entry.kind == "symlink":
            target = os.fsencode(self.view.readlink(path))
            return _from_entry(entry, "symlink", blob_id(target))
        if entry.kind == "dir":
            return Side("dir", entry.mode, entry.size, entry.mtime_ns, None)
        self._note_special(path, entry)
        return None

    def _note_special(self, path: str, entry: Entry) -> None:
        """A device, fifo or socket in the view, unless the worktree has one there too."""
        real = self._lstat(path)
        if real is not None and stat.S_IFMT(real.st_mode) == stat.S_IFMT(entry.mode):
            return
        if not self.spec.matches(path) or (
            self.ignore is not None and self.ignore.ignored(path, False)
        ):
            return
        self.special.append(path)


def _from_entry(entry: Entry, kind: StateKind, oid: pygit2.Oid) -> Side:
    return Side(kind, entry.mode, entry.size, entry.mtime_ns, str(oid))


def _differs(old: Side | None, new: Side | None) -> bool:
    """Whether the filesystem can tell the two apart; times do not count."""
    if old is None or new is None:
        return old is not new
    return old.kind != new.kind or old.oid != new.oid or old.perm != new.perm


class _Tracked:
    """Paths in the worktree's index, and the directories holding them (computed on demand)."""

    def __init__(self, index: pygit2.Index) -> None:
        self.index = index

    def holds(self, path: str, is_dir: bool) -> bool:
        """Whether git tracks `path` as what it is now: a file the index names, or a directory
        holding files it names. A file where a tracked directory was is untracked."""
        return path in self.index or (is_dir and path in self._dirs)

    @cached_property
    def _dirs(self) -> frozenset[str]:
        dirs: set[str] = set()
        for entry in self.index:
            parent = parent_path(entry.path)
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = parent_path(parent)
        return frozenset(dirs)
