"""A throwaway session view of a commit: what a gated apply runs its test in.

Its lower layer is the session's real worktree; its delta, made in a directory of its own
(`trials/` in the state dir, not a session's: no registry row, so no `ls`, radar or gc sees
it), holds only the paths where the commit differs from that worktree (`throwaway.differing`)
and a `.git` of its own whose HEAD is the commit, detached, with the index to match. So it
costs what the apply changed, not a checkout of the whole tree, and the real worktree, the
session and its delta stay as they are. Mounted while the block runs, with this process as
its participant, then stopped and removed; one left by a process that died is removed by the
next one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from gitsess.git import throwaway
from gitsess.git.repo import RepoContext, Repository
from gitsess.overlay import layout, protocol
from gitsess.processes import alive
from gitsess.runtime import mount
from gitsess.services import live, test_logs
from gitsess.services.archives import lay
from gitsess.services.real_tree import real_root
from gitsess.services.viewwrite import offline_writer
from gitsess.store.db import private_dir
from gitsess.store.registry import Session


def trials_dir(ctx: RepoContext) -> Path:
    return ctx.state_dir / "trials"


@contextmanager
def result_view(
    ctx: RepoContext, session: Session, repo: Repository, commit: str
) -> Iterator[Path]:
    """The files of `commit` (in `repo`, the session's worktree repository) at a mount point,
    with a `.git` that git commands inside can read and write; nothing of it outlives the
    block."""
    root = real_root(session)
    parent = trials_dir(ctx)
    private_dir(parent)
    _sweep(parent)
    where = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=parent))
    spec = mount.MountSpec(
        session_id=f"trial-{session.id}",
        lower=session.worktree,
        session_dir=where,
        hidden=live.hidden_paths(ctx, session),
        registry=ctx.registry_path,
    )
    try:
        paths = throwaway.differing(repo, commit)
        with offline_writer(where, root, spec.hidden) as writer:
            lay(writer, repo, root, paths)
            writer.put_git_file("HEAD", commit.encode() + b"\n")
            writer.put_git_file("index", throwaway.index_for(repo, commit, paths))
        joiner = protocol.Joiner(os.getpid(), test_logs.ROLE, False, [], None)
        status, conn = mount.mount_and_join(spec, joiner)
        with conn:
            yield Path(status.mountpoint)
    finally:
        _remove(where)


def _sweep(parent: Path) -> None:
    """Remove the views of gated applies whose process is gone."""
    for name in os.listdir(parent):
        pid = name.partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            _remove(parent / name)


def _remove(where: Path) -> None:
    with suppress(FileNotFoundError):
        mount.stop(where, where / layout.MOUNTPOINT)
    shutil.rmtree(where, ignore_errors=True)
