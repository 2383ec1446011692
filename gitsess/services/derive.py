"""Sessions made from other work: `fork` (a copy of a live session) and `restore` (a session
brought back from its archive ref), and the list of archives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from gitsess.errors import GitsessError
from gitsess.git.archive import (
    ArchivedPath,
    ArchiveInfo,
    archived_paths,
    blob_data,
    delete_archive,
    list_archives,
    read_archive,
)
from gitsess.git.blob_parts import blob_parts
from gitsess.git.changes import GIT_EXEC, GIT_LINK
from gitsess.git.repo import RepoContext, head_of, open_worktree, worktree_paths
from gitsess.overlay.delta import copy_delta
from gitsess.runtime import mount
from gitsess.services import apply
from gitsess.services.sessions import validate_name
from gitsess.services.viewwrite import view_writer
from gitsess.store.db import private_dir
from gitsess.store.registry import Registry, Session
from gitsess.store.user_index import UserIndex, index_path


def _insert(
    ctx: RepoContext,
    name: str,
    *,
    title: str,
    worktree: Path,
    branch: str | None,
    base_commit: str | None,
    read_only: bool,
    parent: str | None,
) -> Session:
    """A session row and its directory, bound to an existing worktree that it does not own
    (`rm` of it never removes the worktree or branch)."""
    validate_name(name)
    registry = Registry.open(ctx.registry_path, create=True)
    assert registry is not None
    UserIndex(index_path()).add(ctx.state_dir, ctx.common_dir)
    try:
        with registry.write():
            session = registry.insert(
                id=str(uuid.uuid4()),
                name=name,
                title=title,
                worktree=worktree,
                branch=branch,
                base_commit=base_commit,
                read_only=read_only,
                parent=parent,
                created_worktree=False,
                created_branch=False,
            )
            # inside the transaction: no row without its directory
            try:
                private_dir(ctx.session_dir(session.id))
            except OSError as e:
                raise GitsessError(f"cannot create {ctx.session_dir(session.id)}: {e}") from e
        return session
    finally:
        registry.close()


def undo(ctx: RepoContext, session: Session) -> None:
    """Take back a session that was just made, when filling it failed."""
    with Registry.opened(ctx.registry_path, create=False) as registry:
        if registry is not None:
            with registry.write():
                registry.delete(session.id)
    shutil.rmtree(ctx.session_dir(session.id), ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# fork


def fork(ctx: RepoContext, source: Session, name: str) -> Session:
    """A new session with a copy of `source`'s delta (changes, audit log, key-value store) and
    the same worktree, branch and base; from then on the two are independent."""
    source = apply.reconcile(ctx, source).session
    session = _insert(
        ctx,
        name,
        title=source.title,
        worktree=source.worktree,
        branch=source.branch,
        base_commit=source.base_commit,
        read_only=source.read_only,
        parent=source.id,
    )
    src = ctx.session_dir(source.id) / "delta.db"
    try:
        with mount.locked(ctx.session_dir(source.id)):  # no daemon starts during an offline copy
            if src.exists() and not mount.copy_delta(source.id, ctx.session_dir(session.id)):
                copy_delta(str(src), str(ctx.session_dir(session.id) / "delta.db"))
    except BaseException:
        undo(ctx, session)
        raise
    return session


# ---------------------------------------------------------------------------------------------
# archives and restore


@dataclass(frozen=True)
class Archive:
    info: ArchiveInfo
    files: int  # paths the archive changed against its base


def archives(ctx: RepoContext) -> list[Archive]:
    """The repository's archives, newest first."""
    repo = ctx.open()
    return [Archive(info, len(archived_paths(repo, info))) for info in list_archives(repo)]


@dataclass(frozen=True)
class Restored:
    session: Session
    archive: ArchiveInfo
    files: int
    notes: list[str] = field(default_factory=list)


def restore(ctx: RepoContext, name: str, new_name: str | None = None) -> Restored:
    """Bring an archived session back: a new session whose delta is the archive's changes
    against its base, bound to the archived session's worktree if it is still there (else to
    the current one), with the archived base. The archive ref goes once the session is made.
    """
    repo = ctx.open()
    info = read_archive(repo, name)
    notes: list[str] = []
    worktree = Path(info.worktree)
    if not worktree.is_dir() or worktree.resolve() not in worktree_paths(repo):
        if ctx.worktree is None:
            raise GitsessError(
                f"the archived session's worktree {info.worktree} is gone and there is no "
                "worktree here to restore it into; run restore inside a worktree"
            )
        if info.worktree:
            notes.append(f"{info.worktree} is gone: restored onto {ctx.worktree}")
        worktree = ctx.worktree
    head = head_of(open_worktree(worktree))
    if info.branch and head.branch != info.branch:
        notes.append(
            f"the session was on {info.branch}; its worktree now has "
            f"{head.branch or 'a detached HEAD'} checked out"
        )
    session = _insert(
        ctx,
        new_name or info.name,
        title=info.title,
        worktree=worktree.resolve(),
        branch=head.branch,
        base_commit=info.base,
        read_only=False,
        parent=None,
    )
    try:
        paths = archived_paths(repo, info)
        lay_paths(ctx, session, repo, paths)
    except BaseException:
        undo(ctx, session)
        raise
    delete_archive(repo, info)
    return Restored(session, info, len(paths), notes)


def lay_paths(
    ctx: RepoContext, session: Session, repo: pygit2.Repository, paths: Sequence[ArchivedPath]
) -> None:
    """Set each path of the session's view to the blob (or the absence) a commit gave it."""
    root = apply.real_root(session)
    with view_writer(ctx, session, root) as writer:
        for item in paths:
            if item.entry is None:
                writer.remove(item.path)
                continue
            oid, mode = item.entry
            if mode == GIT_LINK:
                writer.put_symlink(item.path, blob_data(repo, oid))
            else:
                perm = _perm(root / item.path, mode == GIT_EXEC)
                writer.put_file(item.path, blob_parts(repo, oid), perm)


def lay_git_files(ctx: RepoContext, session: Session, files: Mapping[str, bytes]) -> None:
    """Write these files (paths below `.git`) into the session's own `.git`."""
    with view_writer(ctx, session, apply.real_root(session)) as writer:
        for rel, data in files.items():
            writer.put_git_file(rel, data)


def _perm(real: Path, executable: bool) -> int:
    """A file's permission bits in the view: the real file's, with the executable bits git
    records, or what git checkout would give a new file."""
    with contextlib.suppress(OSError):
        st = real.lstat()
        if stat.S_ISREG(st.st_mode):
            perm = stat.S_IMODE(st.st_mode)
            return perm | ((perm & 0o444) >> 2) if executable else perm & ~0o111
    mask = os.umask(0o022)
    os.umask(mask)
    return (0o777 if executable else 0o666) & ~mask
