"""What `ls` and `show` count of a session: its changed files, its own commits, where its
delta's bytes go.

Its own module, apart from the live services (mount, run): `ls` loads this and what a
session's state needs, and nothing more. A session that holds no path is told so by one
query; one that never touched its `.git` has no commits of its own, and git is not read.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gitsess import durable
from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext
from gitsess.overlay import layout
from gitsess.services.handle import SessionHandle
from gitsess.store.registry import Session

if TYPE_CHECKING:
    from gitsess.overlay.usage import Bytes
    from gitsess.overlay.view import OverlayView
    from gitsess.services.session_git import GitRefs


class Counts(NamedTuple):  # (not a dataclass: see docs/ARCHITECTURE.md on the small commands)
    changed_files: int | None  # files that differ from the worktree's; None: no delta yet
    commits: int | None  # commits of the session's own that its branch lacks
    damaged: bool = False  # its delta.db cannot be read
    head_branch: str | None = None  # its HEAD's branch, when not the session's branch
    below_base: int = 0  # its HEAD was reset this many commits below its base
    bytes_by_kind: Bytes | None = None  # where its delta's bytes go
    # Its real worktree and branch cannot be read here (inside a run of its worktree): the
    # counts that compare with them are None, not a count against the view.
    out_of_reach: bool = False


def out_of_reach(session: Session) -> bool:
    """Whether the session's worktree shows a view here, not the real files: inside a run of
    that worktree, where nothing leads to the real files and the real branch
    (`runtime/inplace.py`)."""
    from gitsess.overlay import mounttable

    return mounttable.is_mount_point(session.worktree)


def counts(ctx: RepoContext, session: Session | SessionHandle, *, sizes: bool = True) -> Counts:
    """What `ls` and `show` count of a session: its changed files and its own commits, and
    with `sizes` where its delta's bytes go."""
    import apsw

    handle = SessionHandle.of(ctx, session)
    delta = handle.delta
    if not delta.exists():
        return Counts(None, None)
    handle.sync()
    with contextlib.suppress(apsw.Error, OSError):  # else the view tells what is wrong
        counted = _untouched(delta, sizes)
        if counted is not None:
            return counted
    from gitsess.overlay.delta import DamagedDelta

    try:
        with handle.view() as view:
            return _counted(ctx, handle, view, sizes)
    except DamagedDelta:
        return Counts(None, None, damaged=True)
    except (OSError, GitsessError):
        return Counts(None, None)


def _untouched(delta: Path, sizes: bool) -> Counts | None:
    """The counts of a session that holds no path at all (no file, directory or deletion of
    its own: it changed nothing, and its git is the real one), None for any other. One query
    (and with `sizes` those of `overlay/usage.py`), where counting loads the overlay's tree:
    `ls` of sessions that did nothing yet stays quick, with --json too."""
    from gitsess.overlay import schema
    from gitsess.overlay.usage import bytes_by_kind, data_bytes

    path = str(delta)
    conn = schema.connect(path, readonly=True)
    try:
        if conn.execute("SELECT EXISTS (SELECT 1 FROM dentries)").fetchall()[0][0]:
            return None
        used = bytes_by_kind(conn, schema.data_dir(path), data_bytes(path)) if sizes else None
        return Counts(0, 0, bytes_by_kind=used)
    finally:
        conn.close()


def _counted(ctx: RepoContext, handle: SessionHandle, view: OverlayView, sizes: bool) -> Counts:
    from gitsess.overlay.usage import bytes_by_kind, data_bytes
    from gitsess.services.changecount import changed_files

    session = handle.row
    store = view.store
    used = bytes_by_kind(store.conn, store.data_dir, data_bytes(store.path)) if sizes else None
    if out_of_reach(session):
        return Counts(None, None, bytes_by_kind=used, out_of_reach=True)
    changed = changed_files(view, session.worktree, handle.hidden())
    if not view.touched_git():  # its git is the real one: no commits, no repository read
        return Counts(changed, 0, bytes_by_kind=used)
    from gitsess.services import session_git

    try:
        # The worktree is the real one: it is no mount point here (checked above), and the
        # session's own worktree was there when the view opened over it.
        refs = session_git.refs_of(view, session, session.worktree)
        own = None if refs is None else own_commits(ctx, handle, view, refs)
    except (GitsessError, KeyError, ValueError):
        return Counts(changed, None, bytes_by_kind=used)
    if refs is None:
        return Counts(changed, 0, bytes_by_kind=used)
    if own is None:
        return Counts(changed, None, bytes_by_kind=used)
    off = (refs.head.branch or "(detached)") if refs.off_branch else None
    return Counts(
        changed, len(own.commits), bytes_by_kind=used, head_branch=off, below_base=own.below_base
    )


class Own(NamedTuple):
    """The session's own commits, oldest first, as (id, subject); how far its HEAD was reset
    below its base."""

    commits: list[tuple[str, str]]
    below_base: int


def own_commits(
    ctx: RepoContext, handle: SessionHandle, view: OverlayView, refs: GitRefs
) -> Own | None:
    """The session's own commits (None: its git cannot be read). Walked by pygit2 (which alone
    took longer than `ls` does) when the refs they follow from changed since the last walk;
    else the last walk's, kept in the session dir (`layout.GIT_COUNTS`; not kept where the
    state dir is read-only, inside a run)."""
    import json

    kept = handle.dir / layout.GIT_COUNTS
    key = [refs.head.branch, refs.head.commit, refs.branch, refs.tip, handle.row.base_commit]
    key += sorted(refs.hide)
    try:
        last = json.loads(kept.read_bytes())
        if last["refs"] == key:
            return Own([(str(c), str(s)) for c, s in last["commits"]], int(last["below_base"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or unreadable: walked again
    walked = _walk(ctx, handle, view, refs)
    if walked is not None:
        with contextlib.suppress(OSError), durable.write_aside(kept) as f:
            f.write(json.dumps({"refs": key, **walked._asdict()}).encode())
    return walked


def _walk(ctx: RepoContext, handle: SessionHandle, view: OverlayView, refs: GitRefs) -> Own | None:
    from gitsess.git.repo import GitError
    from gitsess.git.scratch import scratch_repo
    from gitsess.git.trees import subject
    from gitsess.services import session_git

    repo = ctx.open()
    try:
        git = session_git.state(view, repo, handle.row, handle.row.worktree, refs)
        assert git is not None  # (refs were read: it touched its `.git`)
        # The commits' objects are the session's own, read through its view.
        with scratch_repo(repo, view.own_objects()) as objects:
            return Own([(c, subject(objects, c)) for c in git.commits], git.below_base)
    except GitError:
        return None
