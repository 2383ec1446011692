"""Discarding a session's changes: `plan_discard` (what would go), `discard` (a plan carried out,
leaving alone paths written to since), `discard_commits` (the commits made inside the session).

The pathspecs select changes, ignored paths included. A touched path whose selected changes are
all of it leaves the delta; a change below a touched directory that keeps other changes is
undone by writing the real state back into the view (`viewwrite`). `discard_commits` drops the
session's branch's `.git` paths: the commits go, their changes stay as files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gitsess.errors import GitsessError
from gitsess.git.changes import Change, compute_changes, touched_roots
from gitsess.git.diff import read_real
from gitsess.git.pathspec import Pathspec
from gitsess.git.repo import RepoContext
from gitsess.git.view import Stamp
from gitsess.overlay.gitdir import GIT, in_git
from gitsess.services.apply_journal import droppable, new_stamp, prepare, reconcile, stamp
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import open_real, real_root
from gitsess.store.registry import Session


@dataclass(frozen=True)
class DiscardPlan:
    changes: tuple[Change, ...]  # what goes (for showing it first)
    drop: tuple[str, ...]  # whole touched paths that leave the delta
    # changes below a touched directory that keeps other changes: set back to the real state
    revert: tuple[Change, ...]
    expect: dict[str, Stamp | None]


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
    with SessionHandle(ctx, session).view(root) as view:
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
        # the view never reports `.git`; named, the session's own git state goes whole (a
        # linked worktree's common dir, `.GIT`, with its `.git` file)
        if view.touched_git():
            named = {s.rstrip("/") for s in pathspecs if in_git(os.fsencode(s.rstrip("/")))}
            if os.fsdecode(GIT) in named:
                named.add(os.fsdecode(view.git.common))
            drop += sorted(named)
        expect = {p: stamp(view.entry(p)) for p in drop}
        expect.update({c.path: new_stamp(c) for c in changes.changes})
    return DiscardPlan(changes.changes, tuple(drop), tuple(revert), expect), done.notes


def discard(ctx: RepoContext, session: Session, plan: DiscardPlan) -> Discarded:
    """Carry out a plan from `plan_discard`, leaving alone paths written to since."""
    with prepare(ctx, session) as p:
        with p.handle.view(p.root) as view:
            moved = [path for path, want in plan.expect.items() if stamp(view.entry(path)) != want]
        drop = droppable(plan.drop, moved)
        stay = set(moved)
        revert = [c for c in plan.revert if c.path not in stay]
        p.handle.drop_paths(drop, root=p.root)
        if revert:
            _revert(p.handle, p.root, revert)
    return Discarded(tuple(drop), tuple(c.path for c in revert), tuple(moved), tuple(p.notes))


def discard_commits(ctx: RepoContext, session: Session) -> tuple[str, ...]:
    """Forget the commits made inside the session: its HEAD, branch and index follow the real
    ones again, and what the commits changed stays in the view's files, uncommitted. A `.git`
    the session broke (no HEAD, say) follows the real one again whole. Returns the commits
    dropped."""
    from gitsess.services import session_git

    with prepare(ctx, session) as p:
        with p.handle.view(p.root) as view:
            try:
                git = session_git.state(view, p.repo, p.session, p.root)
            except GitsessError:  # (a linked worktree's common dir, `.GIT`, goes with it)
                p.handle.drop_paths(sorted({".git", os.fsdecode(view.git.common)}), root=p.root)
                return ()
        if git is None:
            return ()
        # back to the session's branch; a branch made inside stays, with its commits
        p.handle.drop_paths(git.unit_paths(git.branch), root=p.root)
        return git.commits


def _revert(session: SessionHandle, root: Path, changes: Sequence[Change]) -> None:
    """Set each path of the view to its real state: removals deepest first, then the rest
    shallowest first (a directory before what goes into it)."""
    gone = sorted((c for c in changes if c.old is None), key=lambda c: c.path, reverse=True)
    made = sorted((c for c in changes if c.old is not None), key=lambda c: c.path)
    with session.writer(root) as writer:
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


def _within(path: str, top: str) -> bool:
    return top == "" or path == top or path.startswith(top + "/")
