"""A session's object store: a directory of its own on disk, beside delta.db, not delta rows.

Every loose object through FUSE cost about ten kernel requests (docs/PERFORMANCE.md), so a
commit of 5,000 files inside a session took four times as long as in a clone. The view's
object store (`.git/objects`, a linked worktree's `.GIT/objects`) is instead a symlink,
served from the session dir (`LINK`), to the session's store (`STORE`), where git writes
natively: loose objects, packs, commit-graph, whatever git keeps there. The store borrows the
real one as git's own quarantine does, by `info/alternates`, which names `lower/objects`:

- outside a run (the daemon, gitsess, the mount dir) a symlink to the real store;
- inside a run, the real store bound read-only there (`runtime/inplace.py`), the session's
  store bound writable over its own path in the sealed state dir, and the real store's own
  path covered by the view: nothing in a run can write a real object.

So the real store is read-only below the session and what git writes is the session's own
until an apply promotes it (`git.session_objects`); a real `git gc` cannot take a session
commit, whose objects are in its store. gitsess reads the store with the real repository's
objects beside it, never through the store's `info/alternates` (a run may rewrite that), and
reads or writes below the store by descriptors that follow no symlink: a run may plant one (a
fan-out dir, `pack`, `info`, a file written aside) to lead gitsess to another store or into
the real `.git`.

A checkpoint names the whole session's state, objects included, and a rewind may bring back a
HEAD whose objects a `git gc` in the session has since removed from the store. Objects are
immutable files named by their content, so a checkpoint hard-links every file of the store's
fan-out dirs and `pack/` not kept yet into `kept/` (`keep`), and a rewind links back into the
store each one it lacks (`bring_back`), before the refs that may name them come back. gitsess
reads `kept/` after the store. It is not one of the store's alternates: git's gc packs only
objects no alternate has (`repack -l`), so every object a checkpoint kept would stay loose in
the store for good. `kept/` goes with the last checkpoint (`drop_kept`, from the retention) or
with the session; while any checkpoint is left it keeps every file, not knowing whose it is.

A session from before kept its objects as rows below an object store of its own in the view:
a writer that loads it moves them here (`move_rows_out`) and drops the rows, so the symlink
shows; a reader reads them where they are (`overlay/view.py`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from gitsess.overlay import layout
from gitsess.overlay.filecopy import copy_open_file
from gitsess.overlay.gitdir import GitLayout

if TYPE_CHECKING:
    from gitsess.overlay.nodes import Node
    from gitsess.overlay.tree import Tree

STORE = layout.OBJECTS.encode()
LINK = b"objects-link"
LOWER = b"lower"
REAL = LOWER + b"/objects"
KEPT = layout.KEPT.encode()
_HEX = frozenset(b"0123456789abcdef")

OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# (O_NONBLOCK: a FIFO a run planted under an object's name must not hold the open)
OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def store_of(session_dir: bytes) -> bytes:
    return os.path.join(session_dir, STORE)


def own_files(session_dir: bytes) -> ObjectDir:
    """What gitsess reads of the session's own objects: its store, then what checkpoints kept."""
    return ObjectDir(store_of(session_dir), os.path.join(session_dir, KEPT))


def view_path(layout: GitLayout) -> bytes:
    """The view path of the object store: the symlink."""
    return layout.common + b"/objects"


def prepare(session_dir: bytes, real: bytes) -> bytes:
    """Make the session's store, its symlinks and its `info/alternates` (each only where it is
    missing or says something else). Returns the path of the view's symlink."""
    store = store_of(session_dir)
    for d in (store, store + b"/pack", os.path.join(session_dir, LOWER)):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d)
    link = os.path.join(session_dir, LINK)
    _symlink(link, store)
    lower = os.path.join(session_dir, REAL)
    _symlink(lower, real)
    _write_alternates(store, lower + b"\n")
    return link


def _write_alternates(store: bytes, text: bytes) -> None:
    """The store's `info/alternates` says `text` (replaced whole, only when it says something
    else); nothing on the way is followed."""
    top = os.open(store, OPEN_DIR)
    try:
        info = _own_dir(top, b"info")
    finally:
        os.close(top)
    try:
        with (
            contextlib.suppress(OSError),
            os.fdopen(os.open(b"alternates", OPEN_FILE, dir_fd=info), "rb") as f,
        ):
            if f.read() == text:
                return
        aside = b"alternates.new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside, dir_fd=info)
        # (O_EXCL: a symlink planted there meanwhile is not followed either)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        with os.fdopen(os.open(aside, flags, 0o644, dir_fd=info), "wb") as f:
            f.write(text)
        os.replace(aside, b"alternates", src_dir_fd=info, dst_dir_fd=info)
    finally:
        os.close(info)


def _own_dir(parent: int, name: bytes) -> int:
    """The directory `name` in `parent`, opened: made where it is missing, made anew where a
    symlink or a file has its name."""
    try:
        return os.open(name, OPEN_DIR, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=parent)
    os.mkdir(name, dir_fd=parent)
    return os.open(name, OPEN_DIR, dir_fd=parent)


def keep(session_dir: bytes) -> None:
    """Hard-link each object file of the store not kept yet into `kept/` (a checkpoint's)."""
    _link_missing(store_of(session_dir), os.path.join(session_dir, KEPT))


def bring_back(session_dir: bytes) -> None:
    """Hard-link back into the store each kept object file it lacks (a rewind's)."""
    _link_missing(os.path.join(session_dir, KEPT), store_of(session_dir))


def drop_kept(session_dir: bytes) -> None:
    """Remove `kept/`, once no checkpoint is left to rewind to."""
    shutil.rmtree(os.path.join(session_dir, KEPT), ignore_errors=True)


def _link_missing(src: bytes, dest: bytes) -> None:
    """Hard-link the object files of `src` that `dest` lacks into it, by descriptors (a run may
    have made a fan-out dir of the store a symlink). The fan-out dirs first: a `git gc`
    meanwhile packs a loose object before it removes it, so one gone from a fan-out dir is
    found in `pack/` after."""
    fans = sorted(d for d in _names(src, b"", dirs=True) if _is_fan(d))
    listed = [(d, names) for d in (*fans, b"pack") if (names := _object_files(src, d))]
    if not listed:
        return
    os.makedirs(dest, exist_ok=True)
    top = os.open(dest, OPEN_DIR)
    try:
        for d, names in listed:
            _link_into(src, d, names, top)
    finally:
        os.close(top)


def _object_files(store: bytes, d: bytes) -> list[bytes]:
    return [n for n in _names(store, d, dirs=False) if _is_object_file(d, n)]


def _link_into(src: bytes, d: bytes, names: list[bytes], dest_fd: int) -> None:
    """Hard-link the `names` of `src`'s dir `d` that the same dir of `dest_fd` lacks."""
    try:
        from_fd = _open_below(src, d, OPEN_DIR)
    except OSError:
        return  # (gone since listed: a gc removed the emptied dir)
    try:
        to_fd = _own_dir(dest_fd, d)
        try:
            with os.scandir(to_fd) as it:
                have = {os.fsencode(e.name) for e in it}
            for name in names:
                if name not in have:
                    # (gone since listed: a gc packed it, or pruned what nothing reaches)
                    with contextlib.suppress(FileExistsError, FileNotFoundError):
                        os.link(
                            name, name, src_dir_fd=from_fd, dst_dir_fd=to_fd,
                            follow_symlinks=False,
                        )  # fmt: skip
        finally:
            os.close(to_fd)
    finally:
        os.close(from_fd)


def _is_fan(name: bytes) -> bool:
    return len(name) == 2 and _HEX.issuperset(name)


def _is_object_file(d: bytes, name: bytes) -> bool:
    """A loose object, or a pack's file git wrote whole (its temporary files are `tmp_*`); not
    a `.keep`, which git removes once a fetch's pack is referenced (linked back, it would keep
    the pack from every later repack)."""
    if d == b"pack":
        return name.startswith(b"pack-") and not name.endswith(b".keep")
    return len(name) == 38 and _HEX.issuperset(name)


def remove_session_dir(path: str | os.PathLike[str]) -> None:
    """`shutil.rmtree` of a session dir, whose store a run may have made unwritable for its
    owner (`chmod 0 .git/objects/ab`): a directory that refuses is given its owner's rights
    back, with its parent, and removed again. Symlinks are not followed."""

    def again(fn: object, failed: str, info: tuple[type, BaseException, object]) -> None:
        if not isinstance(info[1], PermissionError):
            raise info[1]
        for d in (os.path.dirname(failed), failed):
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(d).st_mode):
                    os.chmod(d, 0o700)
        if stat.S_ISDIR(os.lstat(failed).st_mode):
            shutil.rmtree(failed)
        else:
            os.unlink(failed)

    shutil.rmtree(path, onerror=again)


def _symlink(path: bytes, target: bytes) -> None:
    try:
        if os.readlink(path) == target:
            return
    except FileNotFoundError:
        pass
    aside = path + b".new"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(aside)
    os.symlink(target, aside)
    os.replace(aside, path)


class ObjectDir:
    """The session's own object files (`git.session_objects.ObjectFiles`), read from object
    directories in turn (its store, then `kept/`). Nothing is followed: a symlink a run put
    there is no object."""

    def __init__(self, *dirs: bytes) -> None:
        self.dirs = dirs

    def own_loose_objects(self) -> list[str]:
        ids: set[str] = set()
        for top in self.dirs:
            for fan in filter(_is_fan, _names(top, b"", dirs=True)):
                ids.update(
                    (fan + name).decode("ascii")
                    for name in _names(top, fan, dirs=False)
                    if _is_object_file(fan, name)
                )
        return sorted(ids)

    def own_packs(self) -> list[str]:
        packs = {p for top in self.dirs for p in packs_in(_names(top, b"pack", dirs=False))}
        return sorted(packs)

    def _open(self, rel: str) -> int | None:
        for top in self.dirs:
            try:
                fd = _open_below(top, os.fsencode(rel), OPEN_FILE)
            except OSError:
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        return None

    def read_object_file(self, rel: str) -> bytes | None:
        fd = self._open(rel)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def copy_object_file(self, rel: str, dest: str) -> None:
        fd = self._open(rel)
        if fd is None:
            raise FileNotFoundError(rel)
        try:
            copy_open_file(fd, dest)
        finally:
            os.close(fd)


def packs_in(names: Iterable[bytes]) -> list[str]:
    """The packs a `pack/` dir of these file names holds whole, each with its index, as
    `pack/pack-<id>` (no suffix)."""
    have = set(names)
    return sorted(
        "pack/" + os.fsdecode(name.removesuffix(b".idx"))
        for name in have
        if name.startswith(b"pack-")
        and name.endswith(b".idx")
        and name.removesuffix(b".idx") + b".pack" in have
    )


def _open_below(store: bytes, rel: bytes, flags: int) -> int:
    """`rel` below `store` opened with `flags` (which follow no symlink at its end), through
    no symlink on the way."""
    *dirs, last = rel.split(b"/")
    fd = os.open(store, OPEN_DIR)
    try:
        for name in dirs:
            below = os.open(name, OPEN_DIR, dir_fd=fd)
            os.close(fd)
            fd = below
        return os.open(last, flags, dir_fd=fd)
    finally:
        os.close(fd)


def _names(store: bytes, rel: bytes, *, dirs: bool) -> list[bytes]:
    """The names of the directories (else the regular files) in `rel` below `store`, none
    where that is no directory of the store's own."""
    try:
        fd = _open_below(store, rel, OPEN_DIR) if rel else os.open(store, OPEN_DIR)
    except OSError:
        return []
    try:
        with os.scandir(fd) as it:
            return [
                os.fsencode(e.name)
                for e in it
                if (e.is_dir if dirs else e.is_file)(follow_symlinks=False)
            ]
    except OSError:
        return []
    finally:
        os.close(fd)


def move_rows_out(tree: Tree) -> None:
    """A session from before: copy the files it kept as rows below an object store of its own
    in the view into its store, and drop that directory from the view, so that the symlink
    shows (a writer only; a crash between the two copies them again)."""
    at = view_path(tree.lower.git)
    parent_path, _, name = at.rpartition(b"/")
    parent = tree.table.resolve(parent_path)
    if parent is None or not parent.upper or parent.entries is None:
        return
    ino = parent.entries.get(name)
    top = tree.table.nodes.get(ino) if ino else None
    if top is None or top.entries is None:
        return  # the symlink, or a whiteout: the session removed its store
    store = store_of(tree.lower.session)
    for rel, n in _upper_files(tree, top, b""):
        dest = os.path.join(store, rel)
        if os.path.lexists(dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        aside = dest + b".moving"
        with open(aside, "wb") as f:
            f.write(tree.read_whole(n))
        os.chmod(aside, 0o444)
        os.replace(aside, dest)
    del parent.entries[name]
    tree.table.pending.dentries[(parent.ino, name)] = None


def _upper_files(tree: Tree, d: Node, at: bytes) -> Iterator[tuple[bytes, Node]]:
    for name, ino in sorted((d.entries or {}).items()):
        n = tree.table.nodes.get(ino) if ino else None
        if n is None or not n.upper:
            continue
        rel = os.path.join(at, name) if at else name
        if n.entries is not None:
            yield from _upper_files(tree, n, rel)
        elif stat.S_ISREG(n.mode):
            yield rel, n
