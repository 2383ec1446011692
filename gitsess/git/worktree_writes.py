"""Writing the real tree: each path's `Target`, planning the writes, writing aside, the writes.

A regular file of one link that stays a file is overwritten in place, as `cp` does, its room
reserved with `posix_fallocate` before the first byte changes (a full disk leaves it as it
was); other files, links, kind changes and hard-linked files are written aside and renamed
over. In place, no inode is made or freed per file, which was half of an apply's system time on
ext4, and far more on an ext4 without a journal (the bench machine's), where every new inode is
checked against those deleted in the last seconds. The price: a reader of the real tree may see
a file half written, as during a `git checkout`; a crash half-way is completed from the apply
journal, which writes every path again.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pygit2
from pygit2.enums import ObjectType

from gitsess import durable, progress
from gitsess.errors import GitsessError
from gitsess.git.blobid import CHUNK, HashingReader
from gitsess.git.changes import GIT_EXEC, GIT_LINK, Change, StateKind
from gitsess.git.conflicts import Conflict, lstat_entry
from gitsess.git.diff import read_view
from gitsess.git.scratch import BIG_FILE, BigFile
from gitsess.git.view import SessionView


def write_aside(base: str, target: Target, big: BigFile) -> str | None:
    """`big` written beside the target's path; None (nothing left there) when its content is
    no longer the blob the apply means (the file changed since)."""
    aside = durable.aside_name(base + target.path)
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with big.open() as f, progress.reading(f, f"writing {big.path}", big.size) as read:
            hashed = HashingReader(read, big.size)
            for chunk in iter(partial(hashed.read, CHUNK), b""):
                _write_all(fd, chunk)
        os.fchmod(fd, target.perm)
        if str(hashed.blob_id()) != big.oid:
            os.unlink(aside)
            return None
    except BaseException:
        os.unlink(aside)
        raise
    finally:
        os.close(fd)
    return aside


def parent_dirs(path: str) -> Iterable[str]:
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


@dataclass(frozen=True)
class Target:
    """What one real-tree path must become. `content` gives a file's bytes or a link's target;
    `rewrite` False means only the permission bits change."""

    path: str
    kind: StateKind | None  # None: the path goes away
    perm: int
    content: Callable[[], bytes] | None
    rewrite: bool = True
    big: BigFile | None = None  # a file too big to hold: copied in parts, not `content`
    aside: str | None = None  # the file already written beside the path, to be renamed in


def session_target(view: SessionView, change: Change) -> Target:
    new = change.new
    if new is None:
        return Target(change.path, None, 0, None)
    same_content = change.old is not None and (change.old.kind, change.old.oid) == (
        new.kind,
        new.oid,
    )
    # Never setuid, setgid or sticky: git carries none of them, and with `--allow-other`
    # another user may have set them on a file of the view for the apply to write.
    perm = new.perm & 0o777
    if new.kind == "dir":
        return Target(change.path, "dir", perm, None)
    big = None
    if new.kind == "file" and new.size > BIG_FILE and new.oid is not None:
        big = BigFile(change.path, new.oid, new.size, partial(view.open, change.path))
    return Target(
        change.path,
        new.kind,
        perm,
        lambda: read_view(view, change.path, new),
        rewrite=not same_content,
        big=big,
    )


def tree_target(tree: pygit2.Tree, path: str) -> Target:
    """The path as the commit's tree has it, with git's default permissions (planning only:
    the content is read from the repository when the commit is finished)."""
    try:
        obj = tree[path]
    except KeyError:
        return Target(path, None, 0, None)
    if obj.type != ObjectType.BLOB:
        return Target(path, None, 0, None)  # a directory now: its files are targets of their own
    mode = int(obj.filemode)
    kind: StateKind = "symlink" if mode == GIT_LINK else "file"
    default = (0o777 if mode == GIT_EXEC else 0o666) & ~current_umask()
    return Target(path, kind, default, None)


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class WritePlan:
    targets: tuple[Target, ...]
    skipped: tuple[str, ...]
    conflicts: tuple[Conflict, ...]


def plan_writes(root: Path, targets: Sequence[Target]) -> WritePlan:
    """Drop directory removals that cannot happen because the directory keeps paths this apply
    does not touch (excluded by pathspec or ignore rules): a plain removal is skipped, a
    directory that must become a file or symlink is a conflict."""
    by_path = {t.path: t for t in targets}
    kinds = _RealKinds(root)
    gone = {t.path for t in targets if _replaces(kinds, t)}
    skipped: list[str] = []
    conflicts: list[Conflict] = []
    for path in sorted(gone, key=lambda p: -p.count("/")):
        if kinds[path] != "dir":
            continue
        left = _leftovers(root, path, gone)
        if not left:
            continue
        gone.discard(path)
        target = by_path[path]
        if target.kind is None:
            skipped.append(path)
        else:
            conflicts.append(
                Conflict(path, "not-empty", f"directory holds paths outside this apply: {left[0]}")
            )
    conflicts += _blocked_parents(kinds, targets, by_path)
    kept = tuple(t for t in targets if t.path not in skipped)
    return WritePlan(kept, tuple(sorted(skipped)), tuple(conflicts))


def _blocked_parents(
    kinds: _RealKinds, targets: Sequence[Target], by_path: dict[str, Target]
) -> list[Conflict]:
    """A path to create below a real file or symlink that this apply does not turn into a
    directory (its change was left out by a pathspec) cannot be written."""
    conflicts = []
    for target in targets:
        if target.kind is None:
            continue
        for parent in parent_dirs(target.path):
            planned = by_path.get(parent)
            if planned is not None:
                if planned.kind != "dir":
                    conflicts.append(Conflict(target.path, "not-a-directory", f"{parent} is not"))
                break  # the plan makes this parent (and so those above it) a directory
            if kinds[parent] not in (None, "dir"):
                conflicts.append(
                    Conflict(target.path, "not-a-directory", f"{parent} is not a directory")
                )
                break
    return conflicts


def _replaces(kinds: _RealKinds, target: Target) -> bool:
    """Whether the real path has to be removed first (gone, or of another kind)."""
    current = kinds[target.path]
    return current is not None and (target.kind is None or current != target.kind)


class _RealKinds(dict[str, StateKind | None]):
    """The real tree's kind of each path asked about, lstat'ed once: planning asks about the
    same parent directories for every path below them. Only while nothing is written."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.prefix = f"{root}/"

    def __missing__(self, path: str) -> StateKind | None:
        kind = self[path] = real_kind(self.prefix + path)
        return kind


def _leftovers(root: Path, top: str, gone: set[str]) -> list[str]:
    left = []
    for dirpath, dirnames, filenames in os.walk(root / top):
        rel = Path(dirpath).relative_to(root).as_posix()
        for name in dirnames + filenames:
            child = f"{rel}/{name}"
            if child not in gone:
                left.append(child)
    return sorted(left)


def real_kind(path: str | Path) -> StateKind | None:
    entry = lstat_entry(path)
    if entry is None or entry.kind == "other":
        return None
    kind: StateKind = entry.kind
    return kind


def write_targets(root: Path, targets: Sequence[Target]) -> tuple[str, ...]:
    """Removals deepest first, then creations shallowest first, then directory permissions
    deepest first (a read-only directory gets its mode after its entries are in). Returns the
    directories whose entries changed."""
    base = f"{root}/"  # str paths: a Path per file costs more than the system calls here
    changed: set[str] = set()
    for target in sorted(targets, key=lambda t: t.path, reverse=True):
        current = real_kind(base + target.path)
        if current is not None and (target.kind is None or current != target.kind):
            _remove(base + target.path, current)
            changed.add(target.path.rpartition("/")[0])
    # directories known to exist from here on: creations never remove one
    present: set[str] = {""}
    for target in sorted(targets, key=lambda t: t.path):
        if target.kind is not None:
            changed.update(_create(base, target, present))
    for target in sorted(targets, key=lambda t: t.path, reverse=True):
        if target.kind == "dir":
            os.chmod(base + target.path, target.perm)
    return tuple(sorted(changed))


def _remove(path: str, kind: StateKind) -> None:
    if kind == "dir":
        os.rmdir(path)
    else:
        os.unlink(path)


def _create(base: str, target: Target, present: set[str]) -> list[str]:
    """Bring one path (below `base`, the root with a trailing slash) to its target; returns the
    directories that got a new or replaced entry (including those of parents it had to
    create). `present` holds directories known to exist, and gets those made here."""
    path = base + target.path
    changed = _make_parents(base, target.path, present)
    parent = target.path.rpartition("/")[0]
    if target.kind == "dir":
        if target.path not in present and not os.path.isdir(path):
            os.mkdir(path)
            changed.append(parent)
        present.add(target.path)
        return changed
    if not target.rewrite and real_kind(path) == target.kind:
        if target.kind == "file":
            os.chmod(path, target.perm)
        return changed
    aside = target.aside
    if aside is None and target.big is not None:
        aside = write_aside(base, target, target.big)
    if aside is not None:
        os.replace(aside, path)
        return [*changed, parent]
    assert target.content is not None
    if target.kind == "file" and _rewrite_in_place(path, target.content, target.perm):
        return changed
    tmp = durable.aside_name(path)
    if target.kind == "symlink":
        os.symlink(os.fsdecode(target.content()), tmp)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, target.content())
            os.fchmod(fd, target.perm)
        finally:
            os.close(fd)
    os.replace(tmp, path)
    return [*changed, parent]


def _rewrite_in_place(path: str, content: Callable[[], bytes], perm: int) -> bool:
    """Overwrite an existing regular file of one link in place, as `cp` does; False (nothing
    touched) when it is anything else or cannot be opened for writing.

    A file written aside and renamed over costs an inode made and one freed per file, which
    is most of an apply's system time on ext4 (and far more without a journal, where every
    new inode is checked against the recently deleted ones). A reader may see the file half
    written, as during a `git checkout`; a crash half-way is completed from the apply's
    journal, which rewrites every path. The room the new bytes need is allocated before the
    first byte changes, so a full disk leaves the file as it was. A file with other links is
    written aside, so that the other names keep their content."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return False
    try:
        # O_NONBLOCK: should the path have become a FIFO meanwhile, never wait for a reader
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_nlink != 1:
            return False
        data = content()
        if len(data) > now.st_size:
            try:
                os.posix_fallocate(fd, 0, len(data))
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                return False  # a filesystem that cannot reserve room first: written aside
        _write_all(fd, data)
        if len(data) < now.st_size:
            os.ftruncate(fd, len(data))
        if stat.S_IMODE(now.st_mode) != perm:
            os.fchmod(fd, perm)
    finally:
        os.close(fd)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _make_parents(base: str, path: str, present: set[str]) -> list[str]:
    """Create missing parent directories; returns the directories that got them as entries."""
    missing: list[str] = []
    parent = path.rpartition("/")[0]
    while parent not in present and not os.path.isdir(base + parent):
        missing.append(parent)
        parent = parent.rpartition("/")[0]
    present.add(parent)
    for directory in reversed(missing):
        os.mkdir(base + directory)
        present.add(directory)
    return [d.rpartition("/")[0] for d in missing]


def workdir_of(repo: pygit2.Repository) -> Path:
    if repo.workdir is None:
        raise GitsessError(f"{repo.path} has no worktree")
    return Path(repo.workdir)
