"""Applying a session's work: diff, apply (commit, patch, worktree), discard, archive.

The git layer computes and writes; this module decides what a session command means around it:
which real worktree to compare with, which paths then leave the delta, where the base moves, and
how an apply killed half-way is completed.

Keeping the session still. A live session may be written to while an apply runs. Every path
that is to leave the delta is checked first against the state the apply read (kind, mode, size,
mtime as the view reports them, which any write through the mount changes); a path written to
meanwhile stays in the delta, with every directory above it that the apply would have dropped.

Crash safety. Before anything visible changes, an apply that will write the real tree writes a
journal (`apply-journal.json` in the session dir, written aside, fsync'd and renamed): the git
layer's prepared `CommitResult`, or the worktree paths to write, with the paths to drop and the
states they must still have. Every command here that touches a session first completes a journal
it finds (`reconcile`): `finish_commit` again, or the remaining worktree writes, then the pruning
and the base move. The branch ref moves last and compare-and-swap, so a commit is never made
twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pygit2

from gitsess import processes
from gitsess.durable import fsync_dir
from gitsess.errors import GitsessError

# Change is what a command shows of each path (the cli meets it here, not in the git layer).
from gitsess.git.changes import Change as Change
from gitsess.git.changes import ChangeSet, compute_changes, touched_roots
from gitsess.git.diff import DiffResult, diff_changes, read_real
from gitsess.git.pathspec import Pathspec
from gitsess.git.repo import RepoContext, open_worktree
from gitsess.git.scratch import scratch_repo
from gitsess.git.view import Entry
from gitsess.overlay import mounttable
from gitsess.overlay.view import OverlayView
from gitsess.runtime import mount
from gitsess.services import live
from gitsess.services.viewwrite import view_writer
from gitsess.store.registry import Registry, Session

# The git layer's apply and archive modules are imported where they are used: diff, the most
# frequent command here, needs neither, and loading them is about 12 ms of its start.
if TYPE_CHECKING:
    from gitsess.git.apply_commit import CommitResult
    from gitsess.git.conflicts import Conflict

    # the patch an apply returns, which the cli writes out
    from gitsess.git.patch import PatchResult as PatchResult
    from gitsess.services.session_git import SessionGit

JOURNAL = "apply-journal.json"
_LOCK = "apply.lock"

# (kind, mode, size, mtime_ns) as the view reported it, or None for an absent path
Stamp = tuple[str, int, int, int] | None


# ---------------------------------------------------------------------------------------------
# where the session's real worktree is, and its view


def real_root(session: Session) -> Path:
    """The session's real worktree as this process can reach it.

    Inside a session (`gitsess run`), a private mount namespace shows the view at the worktree's
    own path, so the real files are not there. The daemon of that session runs outside it: its
    root directory (`/proc/<pid>/root`) is the ordinary filesystem, real worktree included.
    """
    worktree = session.worktree
    if not worktree.is_dir():
        raise GitsessError(f"session {session.name} is bound to {worktree}, which no longer exists")
    if not mounttable.is_mount_point(worktree):
        return worktree
    inside = os.environ.get("GITSESS_SESSION_ID")
    status = mount.status(inside) if inside else None
    if status is None:
        raise GitsessError(
            f"{worktree} shows a session's view here, not the real worktree; "
            "run this outside the session"
        )
    return Path(f"/proc/{status.daemon_pid}/root") / worktree.relative_to("/")


class _ReachedWorktree(pygit2.Repository):
    """A worktree's repository whose files are at `root`, a path that reaches them through
    another process's root directory.

    libgit2 resolves a worktree path to its real path, which from inside a session is the view
    again; the git layer reads and writes real files only through `workdir`, so it says `root`.
    """

    def __init__(self, root: Path) -> None:
        super().__init__(str(root))
        self.reached = f"{root}/"

    @property
    def workdir(self) -> str:  # type: ignore[override]
        return self.reached


def open_real(session: Session, root: Path) -> pygit2.Repository:
    """The session's worktree repository, its files read and written at `root`."""
    if root == session.worktree:
        return open_worktree(root)
    try:
        return _ReachedWorktree(root)
    except pygit2.GitError as e:
        raise GitsessError(f"worktree {session.worktree} is not usable: {e}") from e


@contextmanager
def _open(ctx: RepoContext, session: Session, root: Path) -> Iterator[OverlayView]:
    """The view over `root`, after the live daemon (if any) committed its state."""
    mount.sync(session.id)
    view = OverlayView(
        ctx.session_dir(session.id) / "delta.db", root, live.hidden_paths(ctx, session)
    )
    try:
        yield view
    finally:
        view.close()


@contextmanager
def _locked(ctx: RepoContext, session: Session) -> Iterator[None]:
    """One apply, discard or reconcile of a session at a time."""
    path = ctx.session_dir(session.id) / _LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise GitsessError(f"session {session.name} was removed meanwhile") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _stamp(entry: Entry | None) -> Stamp:
    return None if entry is None else (entry.kind, entry.mode, entry.size, entry.mtime_ns)


def _new_stamp(change: Change) -> Stamp:
    new = change.new
    return None if new is None else (new.kind, new.mode, new.size, new.mtime_ns)


def _within(path: str, top: str) -> bool:
    return top == "" or path == top or path.startswith(top + "/")


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def droppable(paths: Iterable[str], keep: Iterable[str]) -> list[str]:
    """`paths` that may leave the delta: none with a path of `keep` at or below it (dropping a
    directory drops its whole subtree, and `keep` must stay)."""
    kept = set(keep)
    if "" in kept:
        return []
    blocked: set[str] = set()
    for path in kept:
        blocked.add(path)
        parent = _parent(path)
        while parent and parent not in blocked:
            blocked.add(parent)
            parent = _parent(parent)
    return [p for p in paths if p not in blocked]


# ---------------------------------------------------------------------------------------------
# the journal


def _journal_path(ctx: RepoContext, session: Session) -> Path:
    return ctx.session_dir(session.id) / JOURNAL


def _write_journal(ctx: RepoContext, session: Session, data: dict[str, Any]) -> None:
    path = _journal_path(ctx, session)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data))  # `json.dump` encodes in Python, `dumps` in C
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)


def _remove_journal(ctx: RepoContext, session: Session) -> None:
    path = _journal_path(ctx, session)
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _journal(
    target: str,
    changes: ChangeSet,
    applied: Sequence[str],
    keep: Iterable[str],
    *,
    result: CommitResult | None = None,
    base: str | None = None,
    move_base: bool = False,
) -> dict[str, Any]:
    by_path = {c.path: c for c in changes.changes}
    drop = droppable(applied, keep)
    return {
        "target": target,
        "paths": list(applied),
        "drop": drop,
        "expect": {p: _new_stamp(by_path[p]) for p in drop},
        "result": None if result is None else result.to_json(),
        "base": base,
        "move_base": move_base,
    }


def _settle(
    ctx: RepoContext,
    session: Session,
    root: Path,
    journal: dict[str, Any],
    restamp: Iterable[str],
) -> tuple[list[str], list[str]]:
    """Drop what the journal says may go (unless written to meanwhile), refresh the records of
    the real directories the apply wrote into, move the base, forget the journal.
    Returns (dropped, kept because the session changed them meanwhile)."""
    expect: dict[str, Any] = journal["expect"]
    with _open(ctx, session, root) as view:
        # A path the session holds no record of only reads through to the real tree, which
        # the apply itself rewrote (a renamed directory's files): no write of the session's.
        moved = [
            p
            for p in journal["drop"]
            if view.holds(p) and _stamp(view.entry(p)) != _as_stamp(expect[p])
        ]
    drop = droppable(journal["drop"], moved)
    # checked again where the drop happens: a write may come in between the look above and it
    # (the session's git state handed back to the real repository is not compared: the view
    # never reports `.git`)
    expected = {
        p: _mode_size_mtime(expect.get(p))
        for p in drop
        if p in expect and not p.startswith(".git/")
    }
    late = live.drop_paths(
        ctx, replace(session, worktree=root), drop, sorted(set(restamp)), expected
    )
    drop = [p for p in drop if p not in set(late)]
    moved = [*moved, *(p for p in late if p in expect)]
    if journal["move_base"]:
        _set_base(ctx, session, journal["base"])
    _remove_journal(ctx, session)
    return drop, moved


def _mode_size_mtime(value: Any) -> tuple[int, int, int] | None:
    return None if value is None else (int(value[1]), int(value[2]), int(value[3]))


def _as_stamp(value: Any) -> Stamp:
    return None if value is None else (value[0], value[1], value[2], value[3])


def _set_base(ctx: RepoContext, session: Session, base: str | None) -> None:
    with Registry.opened(ctx.registry_path, create=False) as registry:
        if registry is not None and registry.by_id(session.id) is not None:
            registry.update(session.id, base_commit=base)


def _current(ctx: RepoContext, session: Session) -> Session:
    with Registry.opened(ctx.registry_path, create=False) as registry:
        return (registry and registry.by_id(session.id)) or session


@dataclass(frozen=True)
class Reconciled:
    session: Session  # as the registry has it now (the base may have moved)
    notes: list[str] = field(default_factory=list)


def reconcile(ctx: RepoContext, session: Session) -> Reconciled:
    """Complete an apply that was killed half-way, if the session has one."""
    if not _journal_path(ctx, session).exists():
        return Reconciled(session)
    with _locked(ctx, session):
        return Reconciled(_current(ctx, session), _reconcile_locked(ctx, session))


def _reconcile_locked(ctx: RepoContext, session: Session) -> list[str]:
    path = _journal_path(ctx, session)
    try:
        journal = json.loads(path.read_text())
    except FileNotFoundError:
        return []  # another process completed it while we waited for the lock
    except ValueError:
        # the journal is renamed into place whole, so this is not ours half-written
        raise GitsessError(f"{path} is not a gitsess journal; move it away") from None
    root = real_root(session)
    if journal["target"] == "commit":
        notes = _finish_commit(ctx, session, root, journal)
    else:
        notes = _finish_worktree(ctx, session, root, journal)
    written = [*journal["paths"], *(w["path"] for w in (journal.get("result") or {}).get(
        "updated", []))]  # fmt: skip
    gone = _remove_leftovers(root, written)
    if gone:
        notes.append(f"removed {len(gone)} file(s) the killed apply left half-written: "
                     + ", ".join(gone[:3]) + (" ..." if len(gone) > 3 else ""))  # fmt: skip
    return notes


# What a real-tree write of an apply writes aside before renaming it in (`write_targets`).
_LEFTOVER = re.compile(r"\..+\.gitsess-(\d+)\.tmp")


def _remove_leftovers(root: Path, paths: Iterable[str]) -> list[str]:
    """The files an apply that was killed wrote aside and never renamed in, in the folders of
    the paths it was writing: removed (only those of a process that is gone)."""
    removed = []
    for folder in sorted({_parent(p) for p in paths}):
        try:
            names = os.listdir(root / folder)
        except OSError:
            continue
        for name in names:
            found = _LEFTOVER.fullmatch(name)
            if found is None or processes.alive(int(found.group(1))):
                continue
            path = root / folder / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(str(Path(folder) / name))
    return removed


def _finish_commit(
    ctx: RepoContext, session: Session, root: Path, journal: dict[str, Any]
) -> list[str]:
    from gitsess.git.apply_commit import CommitResult, finish_commit

    result = CommitResult.from_json(journal["result"])
    try:
        changed = finish_commit(open_real(session, root), result)
    except GitsessError as e:
        # The ref did not move: the commit never became visible. The delta still holds
        # everything, so the session shows its work as before.
        _remove_journal(ctx, session)
        return [f"an interrupted apply --commit could not be completed ({e}); the session "
                "keeps its changes, apply again"]  # fmt: skip
    # writes made before the crash changed directories too: those of every written path
    written = {_parent(p) for p in result.updated_paths} if result.worktree_updated else set()
    _settle(ctx, session, root, journal, [*changed, *written])
    what = f"commit {result.commit[:10]}" if result.commit else "apply"
    return [f"completed an interrupted apply --commit ({what} on {result.branch})"]


def _finish_worktree(
    ctx: RepoContext, session: Session, root: Path, journal: dict[str, Any]
) -> list[str]:
    from gitsess.git.apply_worktree import apply_worktree

    paths: list[str] = journal["paths"]
    expect: dict[str, Any] = journal["expect"]
    changed: tuple[str, ...] = ()
    from gitsess.git.merge import merge_onto_head

    with _open(ctx, session, root) as view:
        still = [
            p for p in paths if p not in expect or _stamp(view.entry(p)) == _as_stamp(expect[p])
        ]
        if still:  # (no pathspec at all would select every change)
            repo = open_real(session, root)
            specs = [f":(literal){p}" for p in still]
            with scratch_repo(repo) as scratch:
                changes = compute_changes(
                    view, repo, pathspecs=specs, include_ignored=True, store=scratch
                )
                changes = _only(changes, set(still))
                # the same merge as before the crash: its writes come out the same again
                merged = merge_onto_head(repo, scratch, view, changes, session.base_commit)
                # these paths passed the conflict check before the crash; since then only
                # this apply wrote to them
                result = apply_worktree(
                    repo, view, changes, force=True, merged=merged, scratch=scratch
                )
            changed = result.changed_dirs
    _settle(ctx, session, root, journal, [*changed, *(_parent(p) for p in paths)])
    return [f"completed an interrupted apply --worktree ({len(paths)} path(s))"]


def _only(changes: ChangeSet, paths: set[str]) -> ChangeSet:
    return ChangeSet(tuple(c for c in changes.changes if c.path in paths), changes.excluded)


# ---------------------------------------------------------------------------------------------
# diff


def diff(
    ctx: RepoContext,
    session: Session,
    pathspecs: Sequence[str] = (),
    *,
    include_ignored: bool = False,
    binary: bool = False,
    find_renames: bool = False,
    stat_width: int = 80,
) -> tuple[DiffResult, list[str]]:
    """What the session changed against its real worktree; and notes: from `reconcile`, and
    how many commits of its own the session has (their changes are in the diff)."""
    from gitsess.git.merge import merge_onto_head
    from gitsess.git.patch import left_out_by_git
    from gitsess.services import session_git

    done = reconcile(ctx, session)
    root = real_root(session)
    repo = open_real(session, root)
    notes = list(done.notes)
    with _open(ctx, session, root) as view, scratch_repo(repo) as scratch:
        changes = compute_changes(
            view, repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
        )
        merged = merge_onto_head(repo, scratch, view, changes, session.base_commit)
        if merged.conflicts:
            paths = ", ".join(c.path for c in merged.conflicts)
            notes.append(
                f"changed on the branch since the session began, and in the session: {paths}"
                " (shown as the session has them; applying them conflicts)"
            )
        result = diff_changes(
            repo, view, changes, binary=binary, find_renames=find_renames, stat_width=stat_width,
            scratch=scratch, merged=merged.entries,
        )  # fmt: skip
        git = session_git.own_commits(view, repo, session)
    left = left_out_by_git(changes)
    if left:
        notes.append(f"left in the session (git cannot carry them): {', '.join(left)}")
    if git is not None:
        notes.append(
            f"the session is {len(git.commits)} commit(s) of its own ahead of its branch; "
            "their changes are in this diff (apply --commit keeps them as commits)"
        )
    return result, notes


# ---------------------------------------------------------------------------------------------
# apply


@dataclass(frozen=True)
class Applied:
    """What an apply did (or, with dry_run, would do)."""

    target: Literal["commit", "patch", "worktree"]
    dry_run: bool
    applied: tuple[str, ...]  # paths the target took
    skipped: tuple[str, ...]  # selected paths the target could not take; they stay
    conflicts: tuple[Conflict, ...]
    dropped: tuple[str, ...] = ()  # paths that left the delta
    kept: tuple[str, ...] = ()  # applied, but written to in the session meanwhile: they stay
    commit: CommitResult | None = None
    patch: PatchResult | None = None
    base: str | None = None  # the session's base after the apply
    notes: tuple[str, ...] = ()
    promoted: tuple[str, ...] = ()  # the session's own commits this apply took
    squashed: bool = False  # ... as part of one commit

    @property
    def ok(self) -> bool:
        return not self.conflicts

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "target": self.target,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "applied": list(self.applied),
            "skipped": list(self.skipped),
            "conflicts": [
                {"path": c.path, "reason": c.reason, "detail": c.detail} for c in self.conflicts
            ],
            "dropped": list(self.dropped),
            "kept": list(self.kept),
            "base": self.base,
            "notes": list(self.notes),
            "promoted": list(self.promoted),
        }
        if self.commit is not None:
            c = self.commit
            data.update(
                commit=c.commit, branch=c.branch, parent=c.parent, tree=c.tree, merged=c.merged,
                worktree_updated=c.worktree_updated,
            )  # fmt: skip
        if self.patch is not None:
            data["patch_paths"] = list(self.patch.paths)
        return data


@dataclass(frozen=True)
class _Prepared:
    session: Session
    root: Path
    repo: pygit2.Repository
    notes: list[str]


@contextmanager
def _prepare(
    ctx: RepoContext, session: Session, *, writes_real: bool = False
) -> Iterator[_Prepared]:
    with _locked(ctx, session):
        notes = _reconcile_locked(ctx, session) if _journal_path(ctx, session).exists() else []
        session = _current(ctx, session)
        root = real_root(session)
        if writes_real and root != session.worktree:
            # Inside the session, `.git` at the worktree's path is the session's own: libgit2
            # resolves every path to it, so the real branch and index are out of reach here
            # (the real files are not: `--worktree` writes them through the daemon's root).
            raise GitsessError(
                "inside a session, git is the session's own: run this apply outside it"
            )
        yield _Prepared(session, root, open_real(session, root), notes)


def apply_to_commit(
    ctx: RepoContext,
    session: Session,
    pathspecs: Sequence[str] = (),
    *,
    message: str,
    branch: str | None = None,
    author: pygit2.Signature | None = None,
    include_ignored: bool = False,
    force: bool = False,
    dry_run: bool = False,
    squash: bool = False,
) -> Applied:
    """Commit the session's changes on its branch (or `branch`); see `apply_commit`.

    Commits made inside the session come first: a fast-forward of the branch to them when it
    has not moved, else each re-applied three-way (authors and messages kept), or with `squash`
    one commit of them all with `message`; then the uncommitted changes on top. On any conflict
    nothing changes. When the commit lands on the branch checked out in the bound worktree, the
    applied paths leave the delta, and so does the session's HEAD and index (the real ones now
    hold its commits). The session's base becomes the new commit when the commit is on the
    session's own branch or on the one its worktree has checked out.
    """
    from gitsess.git.apply_commit import apply_commit, branch_tip
    from gitsess.git.conflicts import Conflict
    from gitsess.services import session_git

    with _prepare(ctx, session, writes_real=True) as p:
        target = branch or p.session.branch
        if target is None:
            raise GitsessError(
                f"session {p.session.name} is on a detached HEAD; give --branch to commit on"
            )
        with _open(ctx, p.session, p.root) as view, scratch_repo(p.repo) as scratch:
            changes = compute_changes(
                view, p.repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
            )
            own = target.removeprefix("refs/heads/") == p.session.branch
            commits = session_git.own_commits(view, p.repo, p.session)
            stale_git = commits.stale_after_apply() if commits is not None else []
            onto = undo = None
            base = p.session.base_commit
            if commits is not None and not squash:
                # (squashed, they are part of the view's changes against the real worktree,
                # which is still at the session's base: one commit takes them all)
                promoted = session_git.replay(p.repo, commits, branch_tip(p.repo, target) or base)
                if promoted.conflicts:
                    return Applied(
                        "commit", dry_run, (), (), tuple(
                            Conflict(path, "merge", "changed on the branch and in a session commit")
                            for path in promoted.conflicts
                        ), base=base, notes=tuple(p.notes),
                    )  # fmt: skip
                onto, base = promoted.tip, commits.commits[-1]
                undo = session_git.reverted_in_view(
                    scratch, view, commits, set(changes.paths), Pathspec(pathspecs)
                )

            def journal(result: CommitResult) -> None:
                move = own or result.worktree_updated
                applied = result.applied if result.worktree_updated else ()
                keep = [*result.skipped, *changes.excluded]
                data = _journal(
                    "commit", changes, applied, keep, result=result,
                    base=result.commit or result.parent, move_base=move,
                )  # fmt: skip
                if result.worktree_updated and stale_git:
                    data["drop"] += stale_git
                    data["expect"].update(dict.fromkeys(stale_git))
                _write_journal(ctx, p.session, data)

            result = apply_commit(
                p.repo, view, changes, branch=target, base=base,
                message=message, author=author, force=force, dry_run=dry_run,
                on_prepared=journal, scratch=scratch, onto=onto, undo=undo,
            )  # fmt: skip
        outcome = Applied(
            "commit", dry_run, result.applied, result.skipped, result.conflicts,
            commit=result, base=p.session.base_commit, notes=tuple(p.notes),
            promoted=commits.commits if commits is not None else (), squashed=squash,
        )  # fmt: skip
        if not result.ok or dry_run or not _journal_path(ctx, p.session).exists():
            return outcome
        journal_data = json.loads(_journal_path(ctx, p.session).read_text())
        dropped, kept = _settle(ctx, p.session, p.root, journal_data, result.changed_dirs)
        base = journal_data["base"] if journal_data["move_base"] else p.session.base_commit
        return replace(outcome, dropped=tuple(dropped), kept=tuple(kept), base=base)


def apply_to_patch(
    ctx: RepoContext,
    session: Session,
    pathspecs: Sequence[str] = (),
    *,
    mbox: bool = False,
    message: str = "",
    author: pygit2.Signature | None = None,
    include_ignored: bool = False,
    dry_run: bool = False,
) -> Applied:
    """A patch of the session's changes against its real worktree; the session stays as is.

    With `mbox` and commits made inside the session: a mail per commit, then one for the
    changes made since (what `git am` applies on the session's base)."""
    from gitsess.git.merge import merge_onto_head
    from gitsess.git.objects import signature
    from gitsess.git.patch import make_patch, spooled
    from gitsess.services import session_git

    with (
        _prepare(ctx, session) as p,
        _open(ctx, p.session, p.root) as view,
        scratch_repo(p.repo) as scratch,
    ):
        changes = compute_changes(
            view, p.repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
        )
        merged = merge_onto_head(p.repo, scratch, view, changes, p.session.base_commit)
        if merged.conflicts:
            return Applied(
                "patch", dry_run, (), (), merged.conflicts, base=p.session.base_commit,
                notes=tuple(p.notes),
            )  # fmt: skip
        result = make_patch(
            p.repo, view, changes, mbox=mbox, message=message, author=author, dry_run=dry_run,
            merged=merged, scratch=scratch,
        )  # fmt: skip
        git = session_git.own_commits(view, p.repo, p.session) if mbox else None
        if git is not None:
            author = author or signature(p.repo, "AUTHOR")
            mails = _commit_mails(
                scratch, view, changes, git, pathspecs, message=message, author=author
            )
            result = replace(result, body=spooled(mails))
    applied = tuple(c.path for c in changes.changes if c.path not in set(result.skipped))
    return Applied(
        "patch", dry_run, applied, result.skipped, (), patch=result,
        base=p.session.base_commit, notes=tuple(p.notes),
    )  # fmt: skip


def _commit_mails(
    scratch: pygit2.Repository,
    view: OverlayView,
    changes: ChangeSet,
    git: SessionGit,
    pathspecs: Sequence[str],
    *,
    message: str,
    author: pygit2.Signature,
) -> bytes:
    from gitsess.git.commit_mails import changes_mail, commit_mail
    from gitsess.services import session_git

    undo = session_git.reverted_in_view(scratch, view, git, set(changes.paths), Pathspec(pathspecs))
    mails = [commit_mail(scratch, c) for c in git.commits]
    last = changes_mail(
        scratch, view, changes, git.commits[-1], undo, message=message, author=author
    )
    return b"".join([*mails, last])


def apply_to_worktree(
    ctx: RepoContext,
    session: Session,
    pathspecs: Sequence[str] = (),
    *,
    include_ignored: bool = False,
    force: bool = False,
    dry_run: bool = False,
) -> Applied:
    """Write the session's changes into its real worktree; the written paths leave the delta.
    When the worktree's HEAD moved since the session's base, they are merged onto it first
    (`merge_onto_head`): a conflict changes nothing."""
    from gitsess.git.apply_worktree import apply_worktree
    from gitsess.git.merge import merge_onto_head

    with _prepare(ctx, session) as p:
        with _open(ctx, p.session, p.root) as view, scratch_repo(p.repo) as scratch:
            changes = compute_changes(
                view, p.repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
            )
            merged = merge_onto_head(p.repo, scratch, view, changes, p.session.base_commit)
            plan = apply_worktree(
                p.repo, view, changes, force=force, dry_run=True, merged=merged, scratch=scratch
            )
            notes = list(p.notes)
            if changes.special:
                notes.append(
                    "left in the session (apply writes no devices, fifos or sockets): "
                    + ", ".join(changes.special)
                )
            outcome = Applied(
                "worktree", dry_run, plan.applied, plan.skipped, plan.conflicts,
                base=p.session.base_commit, notes=tuple(notes),
            )  # fmt: skip
            if not plan.ok or dry_run or not plan.applied:
                return outcome
            # (a directory holding one stays in the delta, or they would go with it)
            keep = [*plan.skipped, *changes.excluded, *changes.special]
            data = _journal("worktree", changes, plan.applied, keep)
            _write_journal(ctx, p.session, data)
            result = apply_worktree(
                p.repo, view, changes, force=force, merged=merged, scratch=scratch
            )
        if not result.ok:  # the real tree changed between the plan and the writes
            _remove_journal(ctx, p.session)
            return replace(outcome, applied=(), conflicts=result.conflicts)
        dropped, kept = _settle(ctx, p.session, p.root, data, result.changed_dirs)
        return replace(
            outcome, applied=result.applied, skipped=result.skipped, dropped=tuple(dropped),
            kept=tuple(kept),
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# discard


@dataclass(frozen=True)
class DiscardPlan:
    changes: tuple[Change, ...]  # what goes (for showing it first)
    drop: tuple[str, ...]  # whole touched paths that leave the delta
    # changes below a touched directory that keeps other changes: set back to the real state
    revert: tuple[Change, ...]
    expect: dict[str, Stamp]


@dataclass(frozen=True)
class Discarded:
    dropped: tuple[str, ...]
    reverted: tuple[str, ...]
    kept: tuple[str, ...]  # written to in the session since the plan was made: they stay
    notes: tuple[str, ...] = ()


def plan_discard(
    ctx: RepoContext,
    session: Session,
    pathspecs: Sequence[str] = (),
    *,
    include_ignored: bool = True,
) -> tuple[DiscardPlan, list[str]]:
    """What `discard` would undo: every change the pathspecs select, ignored paths included
    unless `include_ignored` is False (then they stay, like unselected changes).

    A path the session touched as a whole (a file it wrote, a directory it created, deleted or
    replaced) leaves the delta; a change below such a directory that other, unselected changes
    share is undone by writing the real state back into the view.
    """
    done = reconcile(ctx, session)
    root = real_root(session)
    repo = open_real(session, root)
    spec = Pathspec(pathspecs)
    with _open(ctx, session, root) as view:
        changes = compute_changes(view, repo, pathspecs=pathspecs, include_ignored=include_ignored)
        roots = touched_roots(view.touched_paths())
        drop: list[str] = []
        revert: list[Change] = []
        for top in roots:
            selected = [c for c in changes.changes if _within(c.path, top)]
            partial = any(_within(e, top) or _within(top, e) for e in changes.excluded)
            if partial:
                revert.extend(selected)
            elif selected or spec.matches(top):
                drop.append(top)
        expect = {p: _stamp(view.entry(p)) for p in drop}
        expect.update({c.path: _new_stamp(c) for c in changes.changes})
    return DiscardPlan(changes.changes, tuple(drop), tuple(revert), expect), done.notes


def discard(ctx: RepoContext, session: Session, plan: DiscardPlan) -> Discarded:
    """Carry out a plan from `plan_discard`, leaving alone paths written to since."""
    with _prepare(ctx, session) as p:
        with _open(ctx, p.session, p.root) as view:
            moved = [path for path, want in plan.expect.items() if _stamp(view.entry(path)) != want]
        drop = droppable(plan.drop, moved)
        stay = set(moved)
        revert = [c for c in plan.revert if c.path not in stay]
        live.drop_paths(ctx, replace(p.session, worktree=p.root), drop)
        if revert:
            _revert(ctx, p.session, p.root, revert)
    return Discarded(tuple(drop), tuple(c.path for c in revert), tuple(moved), tuple(p.notes))


def discard_commits(ctx: RepoContext, session: Session) -> tuple[str, ...]:
    """Forget the commits made inside the session: its HEAD, branch and index follow the real
    ones again, and what the commits changed stays in the view's files, uncommitted. Returns
    the commits dropped."""
    from gitsess.services import session_git

    with _prepare(ctx, session) as p:
        with _open(ctx, p.session, p.root) as view:
            git = session_git.own_commits(view, p.repo, p.session)
        if git is None:
            return ()
        live.drop_paths(ctx, replace(p.session, worktree=p.root), git.stale_after_apply())
        return git.commits


def _revert(ctx: RepoContext, session: Session, root: Path, changes: Sequence[Change]) -> None:
    """Set each path of the view to its real state: removals deepest first, then the rest
    shallowest first (a directory before what goes into it)."""
    gone = sorted((c for c in changes if c.old is None), key=lambda c: c.path, reverse=True)
    made = sorted((c for c in changes if c.old is not None), key=lambda c: c.path)
    with view_writer(ctx, session, root) as writer:
        for change in gone:
            writer.remove(change.path)
        for change in made:
            old = change.old
            assert old is not None
            if old.kind == "dir":
                writer.put_dir(change.path, old.perm)
            elif old.kind == "symlink":
                writer.put_symlink(change.path, read_real(root, change.path, old))
            else:
                writer.put_file(change.path, (read_real(root, change.path, old),), old.perm)


# ---------------------------------------------------------------------------------------------
# archive


@dataclass(frozen=True)
class Archived:
    ref: str | None  # None: nothing to archive
    notes: tuple[str, ...] = ()


def archive(ctx: RepoContext, session: Session) -> Archived:
    """Keep the session's unapplied work as a commit under `refs/gitsess/archive/<name>`.

    Only what git can hold is kept: tracked and untracked-not-ignored files and symlinks (not
    ignored files, permission bits other than the executable bit, empty directories).
    """
    from gitsess.git.archive import create_archive

    if not (ctx.session_dir(session.id) / "delta.db").exists():
        return Archived(None)  # never mounted: nothing was ever written
    if not session.worktree.is_dir():
        return Archived(None, (f"{session.worktree} is gone: the session's changes could not "
                               "be compared with it and were not archived",))  # fmt: skip
    from gitsess.services import session_git

    with _prepare(ctx, session) as p, _open(ctx, p.session, p.root) as view:
        changes = compute_changes(view, p.repo)
        if not changes.git_changes():
            return Archived(None, tuple(p.notes))
        s = p.session
        git = session_git.own_commits(view, p.repo, s)
        keep = [git.commits[-1]] if git is not None else []
        ref = create_archive(
            p.repo, view, changes, base=s.base_commit, name=s.name,
            fields={
                "session_id": s.id, "name": s.name, "title": s.title,
                "worktree": str(s.worktree), "branch": s.branch,
                "created_at": s.created_at.isoformat(),
            },
            keep=keep,
        )  # fmt: skip
    return Archived(ref, tuple(p.notes))


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
    from gitsess.git.archive import snapshot_tree
    from gitsess.git.objects import commit_tree, copy_objects
    from gitsess.services import session_git

    with _prepare(ctx, session) as p:
        base = p.session.base_commit
        if not (ctx.session_dir(session.id) / "delta.db").exists():
            return Snapshot(p.session, commit_tree(p.repo, base), 0, tuple(p.notes))
        with _open(ctx, p.session, p.root) as view, scratch_repo(p.repo) as scratch:
            changes = compute_changes(view, p.repo)
            tree = snapshot_tree(scratch, view, changes, base)
            if keep:
                copy_objects(scratch, p.repo, tree)
            git = session_git.own_commits(view, p.repo, p.session)
    head = git.commits[-1] if git is not None else None
    return Snapshot(p.session, tree, len(changes.git_changes()), tuple(p.notes), head)


# ---------------------------------------------------------------------------------------------
# pathspecs given on the command line


def root_pathspecs(specs: Sequence[str], cwd: Path, roots: Sequence[Path]) -> list[str]:
    """Pathspecs relative to `cwd` (as git takes them) made relative to the worktree root.

    `roots` are the places the worktree may be seen at (the worktree itself, the session's
    mount point); the first that holds `cwd` decides. Outside all of them, relative pathspecs
    are taken from the root. `:/` and `:(top)` pathspecs are from the root already.
    """
    prefix = ""
    for root in roots:
        with contextlib.suppress(ValueError):
            prefix = cwd.relative_to(root).as_posix()
            prefix = "" if prefix == "." else prefix
            break
    return [_root_spec(spec, prefix, roots) for spec in specs]


def _root_spec(spec: str, prefix: str, roots: Sequence[Path]) -> str:
    magic, body = _split_magic(spec)
    if magic.startswith(":("):
        from_top = "top" in (w.strip() for w in magic[2:-1].split(","))
    else:
        from_top = "/" in magic
    if from_top:
        return spec
    if body.startswith("/"):
        for root in roots:
            with contextlib.suppress(ValueError):
                rel = Path(body).relative_to(root).as_posix()
                return magic + ("" if rel == "." else rel)
        raise GitsessError(f"{body}: outside the worktree")
    joined = os.path.normpath(f"{prefix}/{body}" if prefix else body or ".")
    if joined == ".." or joined.startswith("../"):
        raise GitsessError(f"{spec}: outside the worktree")
    return magic + ("" if joined == "." else joined)


def _split_magic(spec: str) -> tuple[str, str]:
    """(":(exclude)" or ":!" or "", the path part)."""
    if spec.startswith(":("):
        close = spec.find(")")
        if close > 0:
            return spec[: close + 1], spec[close + 1 :]
        return "", spec
    if spec.startswith(":"):
        end = 1
        while end < len(spec) and spec[end] in "!^/":
            end += 1
        return spec[:end], spec[end:]
    return "", spec
