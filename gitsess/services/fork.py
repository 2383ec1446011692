"""`fork`: a new session with a copy of a live one's delta; and the row and directory of a
session made from other work (`insert`, `undo`), which `restore` and `remote` use too.

The fork gets S's worktree, branch and base (`parent` = S; it owns neither worktree nor
branch) and a copy of S's delta: changes, `.git`, checkpoints, audit log, kv. A mounted S's
daemon makes the copy itself on its event loop after a commit, so the fork holds S as of one
moment between two requests; an unmounted S is copied under its mount lock. S's object store
and what its checkpoints kept are copied after (`overlay/objectcopy.py`). `fork --at CP` then
rewinds the copy to CP, so its history keeps S's later checkpoints.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.overlay import history, layout, objectcopy
from gitsess.overlay.delta import DeltaStore, copy_delta
from gitsess.runtime import mount
from gitsess.services.apply_journal import reconcile
from gitsess.services.sessions import validate_name
from gitsess.store.db import private_dir
from gitsess.store.registry import Registry, Session
from gitsess.store.user_index import UserIndex, index_path


def insert(
    ctx: RepoContext,
    name: str,
    *,
    title: str,
    worktree: Path,
    branch: str | None,
    base_commit: str | None,
    read_only: bool,
    parent: str | None,
    id: str | None = None,
) -> Session:
    """A session row and its directory, bound to an existing worktree that it does not own
    (`rm` of it never removes the worktree or branch); `id` None gives it a new id."""
    validate_name(name)
    registry = Registry.open(ctx.registry_path, create=True)
    assert registry is not None
    UserIndex(index_path()).add(ctx.state_dir, ctx.common_dir)
    try:
        with registry.write():
            session = registry.insert(
                id=id or str(uuid.uuid4()),
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


def fork(ctx: RepoContext, source: Session, name: str, *, at: int | None = None) -> Session:
    """A new session with a copy of `source`'s delta (changes, audit log, key-value store,
    checkpoints) and the same worktree, branch and base; from then on the two are independent.

    `at`: the new session holds the state of checkpoint `at` (files, `.git`, all of it), by
    rewinding the copy there: its history keeps the source's later checkpoints, and `undo` in
    it brings back the source's state at the fork, as after any rewind.

    All or nothing: the copy is made first, in the new session's directory, and the row that
    makes it a session comes last; a failure (a full disk) removes the directory, which frees
    what the copy took. (Taking back a row on a full disk could fail itself.)"""
    validate_name(name)
    source = reconcile(ctx, source).session
    session_id = str(uuid.uuid4())
    target = ctx.session_dir(session_id)
    src_dir = ctx.session_dir(source.id)
    try:
        private_dir(target)
        with mount.locked(src_dir):  # no daemon starts during an offline copy
            src = layout.delta(src_dir)
            if src.exists() and not mount.copy_delta(src_dir, target):
                copy_delta(str(src), str(layout.delta(target)))
            # after the delta: every object its refs name is in the store by then
            objectcopy.copy_store(bytes(src_dir), bytes(target))
        if at is not None:
            _rewind_copy(layout.delta(target), at)
        return insert(
            ctx,
            name,
            title=source.title,
            worktree=source.worktree,
            branch=source.branch,
            base_commit=source.base_commit,
            read_only=source.read_only,
            parent=source.id,
            id=session_id,
        )
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _rewind_copy(delta: Path, at: int) -> None:
    """The fresh copy (no daemon serves it yet) back to checkpoint `at`."""
    if not delta.exists():
        raise history.no_such(at)
    store = DeltaStore(str(delta))
    try:
        assert store.history is not None
        store.history.clear_unfinished()  # (of a source killed in a rewind, copied offline)
        store.rewind(at, "fork")
    except KeyError:
        raise history.no_such(at) from None
    finally:
        store.close()
