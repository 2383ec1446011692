"""The apply journal (`apply-journal.json`): how an apply killed half-way is completed, and the
lock and preparation every command that changes a session's delta or its real tree goes through.

Keeping the session still. A live session may be written to while an apply runs. Every path
that is to leave the delta is checked first against the state the apply read (kind, mode, size,
mtime as the view reports them, which any write through the mount changes); a path written to
meanwhile stays in the delta, with every directory above it that the apply would have dropped.
The daemon checks again as it drops (`Tree.drop_applied`, between two requests), so a write
that came in after this look is never dropped either. One apply, discard or reconcile of a
session runs at a time (`flock` on the session's `apply.lock`).

Crash safety. Before anything visible changes, an apply that will write the real tree writes a
journal (`apply-journal.json` in the session dir, written aside, fsync'd and renamed): the git
layer's prepared `CommitResult`, or the worktree paths to write, with the paths to drop and the
states they must still have. Every command that touches a session first completes a journal
it finds (`reconcile`): `finish_commit` again, or the remaining worktree writes, then the pruning
and the base move. The branch ref moves last and compare-and-swap, so a commit is never made
twice; a commit that cannot be completed (the branch moved meanwhile) never became visible, so
its journal goes with a note and the delta still holds everything. What the killed apply wrote
aside and never renamed in is removed (a writer that is gone only). `run` and `mount` complete
a journal before they mount, so a view never shows a half-applied session, and `gc` completes
those of sessions nobody touches.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gitsess import durable, processes
from gitsess.durable import fsync_dir
from gitsess.errors import GitsessError
from gitsess.git.changes import Change, ChangeSet, compute_changes
from gitsess.git.repo import RepoContext, Repository
from gitsess.git.scratch import scratch_repo
from gitsess.git.view import Entry, Stamp, kind_of
from gitsess.overlay.gitdir import in_git
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import open_real, real_root
from gitsess.store.registry import Session

# The git layer's apply module is imported where it is used (see services/apply.py).
if TYPE_CHECKING:
    from gitsess.git.apply_commit import CommitResult


@contextmanager
def _locked(session: SessionHandle) -> Iterator[None]:
    """One apply, discard or reconcile of a session at a time."""
    try:
        fd = os.open(session.apply_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise GitsessError(f"session {session.row.name} was removed meanwhile") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def stamp(entry: Entry | None) -> Stamp | None:
    """The path's state as the view reports it (None: absent)."""
    return Stamp.of(entry)


def new_stamp(change: Change) -> Stamp | None:
    return Stamp.of(change.new)


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


@dataclass
class ApplyJournal:
    """What `apply-journal.json` holds; `to_json` is the file's format, which a journal written
    by an earlier version has too (a crash may be completed by the next version)."""

    target: Literal["commit", "worktree"]
    paths: list[str]  # what the apply writes into the real tree
    drop: list[str]  # what then leaves the delta
    expect: dict[str, Stamp | None]  # ... unless it no longer has this state (written to meanwhile)
    result: CommitResult | None  # the prepared commit, for "commit"
    base: str | None  # the session's base after the apply ...
    move_base: bool  # ... when it moves

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "paths": self.paths,
            "drop": self.drop,
            "expect": {p: _stamp_json(s) for p, s in self.expect.items()},
            "result": None if self.result is None else self.result.to_json(),
            "base": self.base,
            "move_base": self.move_base,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApplyJournal:
        from gitsess.git.apply_commit import CommitResult

        result = data["result"]
        return cls(
            target=data["target"],
            paths=list(data["paths"]),
            drop=list(data["drop"]),
            expect={p: _as_stamp(v) for p, v in data["expect"].items()},
            result=None if result is None else CommitResult.from_json(result),
            base=data["base"],
            move_base=data["move_base"],
        )


def read_journal(session: SessionHandle) -> ApplyJournal:
    return ApplyJournal.from_json(json.loads(session.journal.read_text()))


def write_journal(session: SessionHandle, journal: ApplyJournal) -> None:
    with durable.write_aside(session.journal, durable=True) as f:
        f.write(
            json.dumps(journal.to_json()).encode()
        )  # `json.dump` encodes in Python, `dumps` in C


def remove_journal(session: SessionHandle) -> None:
    path = session.journal
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def new_journal(
    target: Literal["commit", "worktree"],
    changes: ChangeSet,
    applied: Sequence[str],
    keep: Iterable[str],
    *,
    result: CommitResult | None = None,
    base: str | None = None,
    move_base: bool = False,
) -> ApplyJournal:
    by_path = {c.path: c for c in changes.changes}
    drop = droppable(applied, keep)
    return ApplyJournal(
        target=target,
        paths=list(applied),
        drop=drop,
        expect={p: new_stamp(by_path[p]) for p in drop},
        result=result,
        base=base,
        move_base=move_base,
    )


def settle(
    session: SessionHandle,
    root: Path,
    journal: ApplyJournal,
    restamp: Iterable[str],
) -> tuple[list[str], list[str]]:
    """Drop what the journal says may go (unless written to meanwhile), refresh the records of
    the real directories the apply wrote into, move the base, forget the journal.
    Returns (dropped, kept because the session changed them meanwhile)."""
    expect = journal.expect
    # (asked anew: the session may have been written to while the apply ran)
    session.sync(again=True)
    with session.view(root) as view:
        # A path the session holds no record of only reads through to the real tree, which
        # the apply itself rewrote (a renamed directory's files): no write of the session's.
        moved = [p for p in journal.drop if view.holds(p) and stamp(view.entry(p)) != expect[p]]
    drop = droppable(journal.drop, moved)
    # checked again where the drop happens: a write may come in between the look above and it
    # (the session's git state handed back to the real repository is not compared: the view
    # never reports `.git`)
    expected = {p: expect.get(p) for p in drop if p in expect and not in_git(os.fsencode(p))}
    late = session.drop_paths(drop, sorted(set(restamp)), expected, root=root)
    drop = [p for p in drop if p not in set(late)]
    moved = [*moved, *(p for p in late if p in expect)]
    if journal.move_base:
        session.set_base(journal.base)
    remove_journal(session)
    return drop, moved


def _stamp_json(value: Stamp | None) -> list[Any] | None:
    return None if value is None else [kind_of(value.mode), *value]


def _as_stamp(value: Any) -> Stamp | None:
    """From the file's [kind, mode, size, mtime_ns] (the kind is in the mode too)."""
    return None if value is None else Stamp(int(value[1]), int(value[2]), int(value[3]))


@dataclass(frozen=True)
class Reconciled:
    session: Session  # as the registry has it now (the base may have moved)
    notes: list[str] = field(default_factory=list)


def reconcile(ctx: RepoContext, session: Session | SessionHandle) -> Reconciled:
    """Complete an apply that was killed half-way, if the session has one."""
    handle = SessionHandle.of(ctx, session)
    if not handle.journal.exists():
        return Reconciled(handle.row)
    with _locked(handle):
        notes = _reconcile_locked(handle)
        return Reconciled(handle.reread(), notes)


def _reconcile_locked(session: SessionHandle) -> list[str]:
    path = session.journal
    try:
        journal = read_journal(session)
    except FileNotFoundError:
        return []  # another process completed it while we waited for the lock
    except ValueError:
        # the journal is renamed into place whole, so this is not ours half-written
        raise GitsessError(f"{path} is not a gitsess journal; move it away") from None
    root = real_root(session.row)
    if journal.target == "commit":
        notes = _finish_commit(session, root, journal)
    else:
        notes = _finish_worktree(session, root, journal)
    written = [*journal.paths, *(journal.result.updated_paths if journal.result else ())]
    gone = _remove_leftovers(root, written)
    if gone:
        notes.append(f"removed {len(gone)} file(s) the killed apply left half-written: "
                     + ", ".join(gone[:3]) + (" ..." if len(gone) > 3 else ""))  # fmt: skip
    return notes


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
            writer = durable.aside_writer(name)
            if writer is None or processes.alive(writer):
                continue
            path = root / folder / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(str(Path(folder) / name))
    return removed


def _finish_commit(session: SessionHandle, root: Path, journal: ApplyJournal) -> list[str]:
    from gitsess.git.apply_commit import finish_commit

    result = journal.result
    assert result is not None  # a "commit" journal holds its prepared commit
    try:
        changed = finish_commit(open_real(session.row, root), result)
    except GitsessError as e:
        # The ref did not move: the commit never became visible. The delta still holds
        # everything, so the session shows its work as before.
        remove_journal(session)
        return [f"an interrupted apply --commit could not be completed ({e}); the session "
                "keeps its changes, apply again"]  # fmt: skip
    # writes made before the crash changed directories too: those of every written path
    written = {_parent(p) for p in result.updated_paths} if result.worktree_updated else set()
    settle(session, root, journal, [*changed, *written])
    what = f"commit {result.commit[:10]}" if result.commit else "apply"
    return [f"completed an interrupted apply --commit ({what} on {result.branch})"]


def _finish_worktree(session: SessionHandle, root: Path, journal: ApplyJournal) -> list[str]:
    from gitsess.git.apply_worktree import apply_worktree

    paths = journal.paths
    expect = journal.expect
    changed: tuple[str, ...] = ()
    from gitsess.git.merge import merge_onto_head

    with session.view(root) as view:
        still = [p for p in paths if p not in expect or stamp(view.entry(p)) == expect[p]]
        if still:  # (no pathspec at all would select every change)
            repo = open_real(session.row, root)
            specs = [f":(literal){p}" for p in still]
            with scratch_repo(repo) as scratch:
                changes = compute_changes(
                    view, repo, pathspecs=specs, include_ignored=True, store=scratch
                )
                changes = _only(changes, set(still))
                # the same merge as before the crash: its writes come out the same again
                merged = merge_onto_head(repo, scratch, view, changes, session.row.base_commit)
                # these paths passed the conflict check before the crash; since then only
                # this apply wrote to them
                result = apply_worktree(
                    repo, view, changes, force=True, merged=merged, scratch=scratch
                )
            changed = result.changed_dirs
    settle(session, root, journal, [*changed, *(_parent(p) for p in paths)])
    return [f"completed an interrupted apply --worktree ({len(paths)} path(s))"]


def _only(changes: ChangeSet, paths: set[str]) -> ChangeSet:
    return ChangeSet(tuple(c for c in changes.changes if c.path in paths), changes.excluded)


# ---------------------------------------------------------------------------------------------
# what every command that changes the delta or the real tree starts with


@dataclass(frozen=True)
class PreparedApply:
    handle: SessionHandle
    session: Session  # the handle's row as the registry had it under the lock
    root: Path
    repo: Repository
    notes: list[str]


@contextmanager
def prepare(ctx: RepoContext, session: Session | SessionHandle) -> Iterator[PreparedApply]:
    """Under the session's apply lock, a journal found completed first: the session as the
    registry has it now, its real worktree and repository."""
    handle = SessionHandle.of(ctx, session)
    with _locked(handle):
        notes = _reconcile_locked(handle) if handle.journal.exists() else []
        row = handle.refresh()
        root = real_root(row)
        yield PreparedApply(handle, row, root, open_real(row, root), notes)
