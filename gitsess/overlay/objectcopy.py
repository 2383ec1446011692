"""A fork's copy of a session's object store (`objectdir.py`) and of what its checkpoints kept.

The copy is of the files, reflinked where the filesystem can, else copied: hard links would let
a run of one session change the other's files in place. `kept/` files that are links of store
files in the source are links of their copies in the fork (one copy each, as in the source).

The source may be live, and git in a run writes its store directly (not through the daemon
that froze to copy the delta), so the store is copied after the delta: git writes an object
before a ref names it, so every object the copied refs name is there to copy. A `git gc` that
packs and removes loose objects meanwhile makes a listed file vanish; the fan-out dirs are
copied before `pack/` (a gc writes the pack before it removes the loose objects), and a pass
in which a file vanished is followed by another, which copies what is still missing.

The source is read by descriptors that follow no symlink: a run may swap a dir or a file of its
store for a symlink while the copy walks it, and what that leads to must not reach the fork.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from gitsess.overlay import filecopy, objectdir

# Passes over a store that changed under the copy (three `git gc`s in a row meanwhile).
PASSES = 3
# What is the source's alone: its alternates name its own session dir (`objectdir.prepare`
# writes the fork's).
_OWN = {objectdir.STORE: {b"info/alternates"}, objectdir.KEPT: set()}


def copy_store(src: bytes, dest: bytes) -> None:
    """Copy the object store and `kept/` of the session dir `src` into the session dir `dest`,
    then make the fork's symlinks and alternates, borrowing what the source borrows."""
    for top in (objectdir.STORE, objectdir.KEPT):
        copier = _Copier(src, dest, top)
        for _ in range(PASSES):
            copier.vanished = False
            try:
                fd = os.open(os.path.join(src, top), objectdir.OPEN_DIR)
            except OSError:
                break  # none, or not a directory of the session's own
            try:
                copier.copy(fd, b"")
            finally:
                os.close(fd)
            if not copier.vanished:
                break
    # (a source never loaded has no store; the fork's first view makes its own)
    with contextlib.suppress(OSError):
        objectdir.prepare(dest, os.readlink(os.path.join(src, objectdir.REAL)))


class _Copier:
    def __init__(self, src: bytes, dest: bytes, top: bytes) -> None:
        self.dest = os.path.join(dest, top)
        self.skip = _OWN[top]
        # `kept/` files that are the store's own, linked to their copies in the fork
        self.stores = (
            (objectdir.store_of(src), objectdir.store_of(dest)) if top == objectdir.KEPT else None
        )
        self.vanished = False

    def copy(self, fd: int, rel: bytes) -> None:
        """Copy the directory open at `fd`, `rel` below the top."""
        with os.scandir(fd) as it:
            entries = sorted(
                ((os.fsencode(e.name), e) for e in it),
                key=lambda pair: (_order(rel, pair[0]), pair[0]),
            )
        dest_dir = os.path.join(self.dest, rel)
        os.makedirs(dest_dir, mode=0o700, exist_ok=True)
        have = set(os.listdir(dest_dir))
        for name, e in entries:
            sub = os.path.join(rel, name) if rel else name
            if e.is_dir(follow_symlinks=False):
                with self._opened(fd, name, objectdir.OPEN_DIR) as below:
                    if below is not None:
                        self.copy(below, sub)
            elif (
                e.is_file(follow_symlinks=False)
                and name not in have
                and sub not in self.skip
                and not name.startswith(b"tmp_")  # git's, still being written
            ):
                with self._opened(fd, name, objectdir.OPEN_FILE) as opened:
                    if opened is not None:
                        self._file(opened, sub)

    @contextlib.contextmanager
    def _opened(self, fd: int, name: bytes, flags: int) -> Iterator[int | None]:
        """`name` in `fd` opened, None where it vanished or is no longer what it was listed as
        (a symlink now: ELOOP, or a file where a dir was: ENOTDIR)."""
        opened = None
        try:
            opened = os.open(name, flags, dir_fd=fd)
        except FileNotFoundError:
            self.vanished = True
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        try:
            yield opened
        finally:
            if opened is not None:
                os.close(opened)

    def _file(self, fd: int, rel: bytes) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return  # (swapped since listed: a fifo or a device is no object file)
        dest = os.path.join(self.dest, rel)
        if self.stores is not None:
            src_store, dest_store = self.stores
            with contextlib.suppress(OSError):
                if os.path.samestat(st, os.lstat(os.path.join(src_store, rel))):
                    os.link(os.path.join(dest_store, rel), dest)
                    return
        filecopy.copy_open_file(fd, dest)
        os.chmod(dest, stat.S_IMODE(st.st_mode))


def _order(rel: bytes, name: bytes) -> int:
    """The store's top level in the order a gc makes safe: fan-out dirs, `pack/`, the rest
    (commit-graph, multi-pack-index, info/, which name packs)."""
    if rel:
        return 0
    return 0 if len(name) == 2 else 1 if name == b"pack" else 2
