"""Archives: a removed or discarded session's work kept as a commit under
`refs/gitsess/archive/<name>` (`archive`, on `rm` and in `gc`), the list of them, and `restore`
(a session brought back from one). The commits themselves are made in `git/archive_commits.py`.

An archive's tree is the base tree plus the session's git-visible changes (tracked and
untracked-not-ignored), not the view's whole tree: a real-tree edit the session never made is
not its work. Its first parent is the base; the session's own HEAD (its objects promoted first)
and its key-value store (a root commit holding `kv.json`) are further parents named by
trailers, with the session's name, id, title, worktree and branch. Not kept: ignored files,
permission bits git does not keep, empty directories. `restore` makes a new session on the
archived worktree if it is still one (else the current one), lays the tree's changes into it
offline (`lay_paths`, through `viewwrite`), brings back its id (unless taken), its kv store and
its commits (their objects into its object store, `overlay/objectdir.py`), and deletes the ref
only once the session is made. An archive is checked path by path first (`check_paths`), as a
pulled commit is.

`archive` compares the view with the real worktree; when that is gone, it lays the view over a
stand-in of what the worktree held (`_archive_over_stand_in`, which `gc`'s sweep uses too
through `archive_without_worktree`). A missing identity falls back to
`gitsess <gitsess@localhost>`: bookkeeping must not stop `rm`.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gitsess import progress
from gitsess.errors import GitsessError, option
from gitsess.git import tracking
from gitsess.git.archive_commits import (
    PREFIX as ARCHIVE_PREFIX,
)
from gitsess.git.archive_commits import (
    ArchivedPath,
    ArchiveInfo,
    archived_kv,
    archived_paths,
    blob_data,
    create_archive,
    delete_archive,
    list_archives,
    read_archive,
    refused_in_tree,
    refused_paths,
    snapshot_tree,
)
from gitsess.git.blob_parts import blob_parts
from gitsess.git.changes import GIT_EXEC, GIT_LINK, ChangeSet, compute_changes
from gitsess.git.repo import (
    RepoContext,
    Repository,
    common_dir,
    head_of,
    open_worktree,
    worktree_paths,
)
from gitsess.git.scratch import BIG_FILE, scratch_repo
from gitsess.git.trees import commit_tree_id, object_size
from gitsess.overlay import objectdir
from gitsess.overlay.kvtable import kv_items
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount
from gitsess.services import kv as kv_service
from gitsess.services import live, session_git
from gitsess.services.apply_journal import prepare
from gitsess.services.fork import insert, undo
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import real_root
from gitsess.services.viewwrite import ViewWriter, view_writer
from gitsess.store.registry import NameTaken, Registry, Session

# ---------------------------------------------------------------------------------------------
# archiving a session


@dataclass(frozen=True)
class Archived:
    ref: str | None  # None: nothing to archive
    notes: tuple[str, ...] = ()


def archive(ctx: RepoContext, session: Session, *, force: bool = False) -> Archived:
    """Keep the session's unapplied work as a commit under `refs/gitsess/archive/<name>`.

    Only what git can hold is kept: tracked and untracked-not-ignored files and symlinks (not
    ignored files, permission bits other than the executable bit, empty directories). A
    session whose own git state cannot be read (its HEAD names an object it does not hold)
    is refused, unless `force`: then its files are kept without its commits.
    """
    delta = SessionHandle(ctx, session).delta
    if not delta.exists():
        return Archived(None)  # never mounted: nothing was ever written
    if not session.worktree.is_dir():
        return _archive_over_stand_in(ctx, session, delta, force=force)

    with prepare(ctx, session) as p, p.handle.view(p.root) as view:
        s = p.session
        ref = _keep(
            p.repo, view, compute_changes(view, p.repo), s,
            lambda: session_git.own_commits(view, p.repo, s, p.root), force, p.notes,
        )  # fmt: skip
    return Archived(ref, tuple(p.notes))


def _keep(
    repo: Repository,
    view: OverlayView,
    changes: ChangeSet,
    s: Session,
    own_commits: Callable[[], session_git.SessionGit | None],
    force: bool,
    notes: list[str],
) -> str | None:
    """The archive ref of `changes` and of the session's own commits (`own_commits` reads
    them: their objects promoted first) and kv store; None when there is nothing to keep."""
    try:
        git = own_commits()
    except GitsessError as e:
        if not force:
            raise GitsessError(
                f"session {s.name}: its git state cannot be read ({e}), so its commits "
                "cannot be archived (gitsess rm --force removes it, its files archived)"
            ) from e
        git = None
        notes.append(f"its git state could not be read ({e}): its commits are not kept")
    if git is not None and not git.commits:
        git = None
    if not changes.git_changes() and git is None:
        return None
    if git is not None:
        with scratch_repo(repo, view.own_objects()) as scratch:
            session_git.promote(scratch, repo, git)
    return create_archive(
        repo, view, changes, base=s.base_commit, name=s.name,
        fields={
            "session_id": s.id, "name": s.name, "title": s.title,
            "worktree": str(s.worktree), "branch": s.branch,
            "created_at": s.created_at.isoformat(),
        },
        head=git.commits[-1] if git is not None else None, kv=kv_json(view),
    )  # fmt: skip


@dataclass(frozen=True)
class Snapshot:
    session: Session  # as the registry has it now (an interrupted apply may move the base)
    tree: str  # the base's tree with the session's git-visible changes (what `archive` commits)
    changes: int  # how many git-visible changes
    notes: tuple[str, ...] = ()
    head: str | None = None  # the last commit made inside the session, when it made any


def snapshot(ctx: RepoContext, session: Session, *, keep: bool) -> Snapshot:
    """The session's work as a git tree, built like an archive's; with `keep` its objects are
    written to the repository, else only its id is computed (to compare it with another)."""
    from gitsess.git.objects import commit_tree, copy_objects

    with prepare(ctx, session) as p:
        base = p.session.base_commit
        if not p.handle.delta.exists():
            return Snapshot(p.session, commit_tree(p.repo, base), 0, tuple(p.notes))
        with (
            p.handle.view(p.root) as view,
            scratch_repo(p.repo, view.own_objects()) as scratch,
        ):
            changes = compute_changes(view, p.repo)
            tree = snapshot_tree(scratch, view, changes, base)
            git = session_git.own_commits(view, p.repo, p.session, p.root)
            if keep:
                copy_objects(scratch, p.repo, tree)
                if git is not None:
                    session_git.promote(scratch, p.repo, git)
    head = git.commits[-1] if git is not None else None
    return Snapshot(p.session, tree, len(changes.git_changes()), tuple(p.notes), head)


def archive_without_worktree(ctx: RepoContext, session: Session) -> list[str]:
    """Archive the unapplied changes of a session whose worktree is gone, then drop its delta,
    so that `sessions.remove` finds nothing left that it could not compare."""
    delta = SessionHandle(ctx, session).delta
    if not delta.exists():
        return []
    status = mount.status(ctx.session_dir(session.id))
    if status is not None and status.participants:
        pids = ", ".join(str(p.get("pid")) for p in status.participants)
        raise GitsessError(f"session {session.name} is in use (pid {pids})")
    live.unmount(ctx, session)
    # (forced: a sweep must not stop at a git state it cannot read; the note says what went)
    archived = _archive_over_stand_in(ctx, session, delta, force=True)
    for suffix in ("", "-wal", "-shm"):
        delta.with_name(delta.name + suffix).unlink(missing_ok=True)
    ref = archived.ref
    if ref is None:
        return list(archived.notes)
    return [
        *archived.notes,
        f"unapplied changes archived as {ref}; `gitsess restore "
        f"{ref.removeprefix(ARCHIVE_PREFIX)}` brings the session back",
    ]


def _archive_over_stand_in(
    ctx: RepoContext, session: Session, delta: Path, *, force: bool
) -> Archived:
    """`archive` of a session whose worktree is gone: its view laid over a stand-in holding
    what the worktree held, its branch's tip (git refuses to remove a worktree with
    uncommitted changes), else the session's base."""
    repo = ctx.open()
    branch_tip = tracking.tip_id(repo, session.branch) if session.branch else None
    lower = branch_tip if branch_tip is not None else session.base_commit
    notes: list[str] = []
    with (
        tracking.stand_in(repo, lower, ctx.state_dir) as top,
        OverlayView(delta, top) as view,
    ):

        def own_commits() -> session_git.SessionGit | None:
            refs = session_git.refs_without_worktree(view, session, common_dir(repo))
            return None if refs is None else session_git.state(view, repo, session, top, refs)

        changes = compute_changes(view, open_worktree(top))
        ref = _keep(repo, view, changes, session, own_commits, force, notes)
    return Archived(ref, tuple(notes))


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
    paths = archived_paths(repo, info)
    check_paths(paths, f"archive {info.ref_name}")
    if info.head is not None:  # (their tree becomes the session's index)
        head_tree = commit_tree_id(repo, info.head)
        check_refused(refused_in_tree(repo, head_tree), f"archive {info.ref_name}")
    try:
        session = insert(
            ctx,
            new_name or info.name,
            title=info.title,
            worktree=worktree.resolve(),
            branch=head.branch,
            base_commit=info.base,
            read_only=False,
            parent=None,
            id=info.session_id if not _taken(ctx, info.session_id) else None,
        )
    except NameTaken as e:
        raise NameTaken(f"{e}: restore under another name ({option('as', 'NEW_NAME')})") from e
    try:
        lay_paths(ctx, session, repo, paths)
        if info.head is not None:
            store = objectdir.store_of(bytes(ctx.session_dir(session.id)))
            files = session_git.restored_git(repo, session, info, Path(os.fsdecode(store)))
            lay_git_files(ctx, session, files)
        kv = archived_kv(repo, info)
        if kv is not None:
            kv_service.put_json(ctx, session, kv)
    except BaseException:
        undo(ctx, session)
        raise
    delete_archive(repo, info)
    return Restored(session, info, len(paths), notes)


def check_paths(paths: Sequence[ArchivedPath], what: str) -> None:
    """Refuse the whole of `what` (nothing is laid) when it carries a path `refused_paths`
    names: no session made it, and git's own checkout would refuse it too."""
    check_refused(refused_paths(paths), what)


def check_refused(refused: Sequence[str], what: str) -> None:
    if refused:
        shown = ", ".join(repr(p) for p in refused[:5])
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        raise GitsessError(
            f"{what} carries paths no session can hold (a .git in some spelling, or another "
            f"repository's commit): {shown}{more}; refused, nothing was taken"
        )


def kv_json(view: OverlayView) -> bytes | None:
    """The session's key-value store as JSON (what an archive keeps), None when empty."""
    rows = kv_items(view.store.conn)
    return json.dumps(rows, ensure_ascii=False).encode() if rows else None


def _taken(ctx: RepoContext, session_id: str) -> bool:
    with Registry.opened(ctx.registry_path, create=False) as registry:
        return registry is not None and registry.by_id(session_id) is not None


def lay_paths(
    ctx: RepoContext, session: Session, repo: Repository, paths: Sequence[ArchivedPath]
) -> None:
    """Set each path of the session's view to the blob (or the absence) a commit gave it."""
    root = real_root(session)
    with view_writer(ctx, session, root) as writer:
        lay(writer, repo, root, paths)


def lay(writer: ViewWriter, repo: Repository, root: Path, paths: Iterable[ArchivedPath]) -> None:
    """`lay_paths` with a writer of the caller's, over the real worktree at `root`."""
    for item in paths:
        if item.entry is None:
            writer.remove(item.path)
            continue
        oid, mode = item.entry
        if mode == GIT_LINK:
            writer.put_symlink(item.path, blob_data(repo, oid))
        else:
            perm = _perm(root / item.path, mode == GIT_EXEC)
            writer.put_file(item.path, _parts(repo, oid, item.path), perm)


def _parts(repo: Repository, oid: str, path: str) -> Iterator[bytes]:
    """The blob's parts; a big one reports its progress on a terminal (a restore of a file of
    hundreds of MB would otherwise sit silent)."""
    parts = blob_parts(repo, oid)
    if not progress.active():
        return parts
    size = object_size(repo, oid)
    return progress.counting(parts, f"restoring {path}", size) if size >= BIG_FILE else parts


def lay_git_files(ctx: RepoContext, session: Session, files: Mapping[str, bytes]) -> None:
    """Write these files (as `GitLayout.path` names them) into the session's own git state."""
    with view_writer(ctx, session, real_root(session)) as writer:
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
