"""Writing into a session's view from the command line: restore and discard use this.

When the session is mounted, the writes go through its mount like any participant's, so the
daemon records them and every participant sees them at once. When it is not, they go into
delta.db through the overlay's own `Tree`, under the mount lock (no daemon can start
meanwhile), and are committed in one transaction at the end: nothing needs FUSE.

Both ways share one set of operations (`_Ops`) and one piece of logic on top of them
(`ViewWriter`): making parent directories, replacing a path of another kind, removing trees.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from gitsess.errors import GitsessError
from gitsess.git import dotgit
from gitsess.git.repo import RepoContext
from gitsess.git.view import Kind, kind_of
from gitsess.overlay import gitdir, layout
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.gitdir import GitLayout
from gitsess.overlay.nodes import Node
from gitsess.overlay.tree import Tree
from gitsess.runtime import mount
from gitsess.services import live
from gitsess.store.registry import Session


class _Ops(Protocol):
    """Single-path filesystem operations on the view; paths are repository-relative."""

    def kind(self, path: str) -> Kind | None: ...
    def listdir(self, path: str) -> list[str]: ...
    def unlink(self, path: str) -> None: ...
    def rmdir(self, path: str) -> None: ...
    def mkdir(self, path: str, perm: int) -> None: ...
    def write_file(self, path: str, parts: Iterable[bytes], perm: int) -> None: ...
    def symlink(self, path: str, target: bytes) -> None: ...
    def chmod(self, path: str, perm: int) -> None: ...


class _MountOps:
    """Through a live mount, as any process inside the session would write."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _at(self, path: str) -> Path:
        return self.root / path

    def kind(self, path: str) -> Kind | None:
        try:
            return kind_of(os.lstat(self._at(path)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self._at(path)))

    def unlink(self, path: str) -> None:
        os.unlink(self._at(path))

    def rmdir(self, path: str) -> None:
        os.rmdir(self._at(path))

    def mkdir(self, path: str, perm: int) -> None:
        os.mkdir(self._at(path), perm)
        os.chmod(self._at(path), perm)  # mkdir's mode passes through the umask

    def write_file(self, path: str, parts: Iterable[bytes], perm: int) -> None:
        fd = os.open(self._at(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, perm)
        try:
            for data in parts:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, perm)
        finally:
            os.close(fd)

    def symlink(self, path: str, target: bytes) -> None:
        os.symlink(target, os.fsencode(self._at(path)))

    def chmod(self, path: str, perm: int) -> None:
        os.chmod(self._at(path), perm)


class _TreeOps:
    """Straight into the overlay's in-memory tree, committed to delta.db by the caller; each
    change is recorded as this process's, in the audit log as a daemon records a write
    through the mount."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.uid, self.gid = os.getuid(), os.getgid()
        self.pid = os.getpid()

    def _node(self, path: str) -> Node | None:
        return self.tree.resolve(os.fsencode(path))

    def _parent(self, path: str) -> tuple[Node, bytes]:
        head, _, name = path.rpartition("/")
        parent = self._node(head)
        if parent is None or not parent.is_dir:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        return parent, os.fsencode(name)

    def kind(self, path: str) -> Kind | None:
        n = self._node(path)
        return None if n is None else kind_of(self.tree.getattr(n).mode)

    def listdir(self, path: str) -> list[str]:
        n = self._node(path)
        if n is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        return sorted(os.fsdecode(name) for name in self.tree.listing(n))

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        self.tree.unlink(parent.ino, name, by=self.pid)

    def rmdir(self, path: str) -> None:
        parent, name = self._parent(path)
        self.tree.rmdir(parent.ino, name, by=self.pid)

    def mkdir(self, path: str, perm: int) -> None:
        parent, name = self._parent(path)
        self.tree.mkdir(parent.ino, name, perm, self.uid, self.gid, by=self.pid)

    def write_file(self, path: str, parts: Iterable[bytes], perm: int) -> None:
        n = self._node(path)
        if n is None:
            parent, name = self._parent(path)
            n = self.tree.create(
                parent.ino, name, stat.S_IFREG | perm, self.uid, self.gid, by=self.pid
            )
        else:
            self.tree.truncate(n, 0, by=self.pid)
            self.tree.setattr(n, mode=perm, by=self.pid)
        offset = 0
        for data in parts:
            if data:
                self.tree.write(n, offset, data, by=self.pid)
                offset += len(data)

    def symlink(self, path: str, target: bytes) -> None:
        parent, name = self._parent(path)
        self.tree.symlink(parent.ino, name, target, self.uid, self.gid, by=self.pid)

    def chmod(self, path: str, perm: int) -> None:
        n = self._node(path)
        if n is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
        self.tree.setattr(n, mode=perm, by=self.pid)


class ViewWriter:
    """Set paths of the view to a given state, whatever is there now."""

    def __init__(self, ops: _Ops, git: GitLayout) -> None:
        self.ops = ops
        self.git = git  # where the view keeps its git state

    def remove(self, path: str) -> None:
        """Remove `path` (a whole tree for a directory); nothing to do when it is absent."""
        _check(path)
        self._remove(path)

    def _remove(self, path: str) -> None:
        kind = self.ops.kind(path)
        if kind is None:
            return
        if kind == "dir":
            for name in self.ops.listdir(path):
                self._remove(f"{path}/{name}")
            self.ops.rmdir(path)
        else:
            self.ops.unlink(path)

    def put_file(self, path: str, parts: Iterable[bytes], perm: int) -> None:
        """Set a file to the content given in `parts` (a file of any size, a part at a time)."""
        self._prepare(path, "file")
        self.ops.write_file(path, parts, perm)

    def put_git_file(self, rel: str, data: bytes, perm: int = 0o644) -> None:
        """Set a file of the session's own git state (`rel` as `GitLayout.path` names it, its
        directories made as needed), which the paths above never reach (work content and git
        state are kept apart)."""
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            raise GitsessError(f"not a path inside the session's .git: {rel!r}")
        path = self.git.path(rel)
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            found = self.ops.kind(parent)
            if found is None:
                self.ops.mkdir(parent, 0o755)
            elif found != "dir":
                raise GitsessError(f"{parent} in the session's view is not a directory")
        kind = self.ops.kind(path)
        if kind is not None and kind != "file":
            raise GitsessError(f"{path} in the session's view is not a file")
        self.ops.write_file(path, (data,), perm)

    def put_symlink(self, path: str, target: bytes) -> None:
        self._prepare(path, None)
        self.ops.symlink(path, target)

    def put_dir(self, path: str, perm: int) -> None:
        if self._prepare(path, "dir") == "dir":
            self.ops.chmod(path, perm)
        else:
            self.ops.mkdir(path, perm)

    def kind(self, path: str) -> Kind | None:
        return self.ops.kind(path)

    def _prepare(self, path: str, keep: Kind | None) -> Kind | None:
        """Make the parent directories; remove what is at `path` unless it is of kind `keep`.
        Returns the kind left at `path`."""
        _check(path)
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            kind = self.ops.kind(parent)
            if kind != "dir":
                if kind is not None:
                    self.ops.unlink(parent)
                self.ops.mkdir(parent, 0o777 & ~_umask())
        kind = self.ops.kind(path)
        if kind is not None and kind != keep:
            self._remove(path)
            return None
        return kind


def _check(path: str) -> None:
    # (a `.git` anywhere, in any spelling: the session's own is `put_git_file`'s, and one
    # further down is another repository, whose config git would run)
    if dotgit.refused(path):
        raise GitsessError(f"not a path inside the session's view: {path!r}")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def view_writer(ctx: RepoContext, session: Session, lower: Path) -> Iterator[ViewWriter]:
    """A writer for the session's view over the real worktree at `lower` (the worktree path,
    or where it is reachable from inside a session)."""
    session_dir = ctx.session_dir(session.id)
    with mount.locked(session_dir):
        status = mount.status(ctx.session_dir(session.id))
        if status is not None:
            if status.read_only:
                raise GitsessError(f"session {session.name} is mounted read-only")
            try:
                git = gitdir.linked_git(os.fsencode(lower), str(session_dir), writer=False)[0]
                yield ViewWriter(_MountOps(Path(status.mountpoint)), git)
            except OSError as e:
                raise GitsessError(f"writing into session {session.name}: {e}") from e
            return
        try:
            with offline_writer(session_dir, lower, live.hidden_paths(ctx, session)) as writer:
                yield writer
        except OSError as e:
            raise GitsessError(f"writing into session {session.name}: {e.strerror}") from e


@contextmanager
def offline_writer(session_dir: Path, lower: Path, hidden: Iterable[str]) -> Iterator[ViewWriter]:
    """A writer straight into the delta.db in `session_dir` (made when missing), committed in
    one transaction at the end; the caller makes sure no daemon serves it meanwhile."""
    store = DeltaStore(str(layout.delta(session_dir)))
    try:
        tree = Tree(store, str(lower), {os.fsencode(h) for h in hidden})
        yield ViewWriter(_TreeOps(tree), tree.lower.git)
        tree.save()
    finally:
        store.close()
