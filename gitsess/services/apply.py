"""Applying a session's work: diff, and apply into a commit, a patch or the real worktree.

The git layer computes and writes; this module decides what a session command means around it:
which real worktree to compare with, which paths then leave the delta and where the base moves.
How a path written to during an apply stays, and how an apply killed half-way is completed, is
in `services/apply_journal.py`.

Every command compares the view with the real worktree (`git/changes.py`), and when the
worktree's HEAD moved since the session's base (a `git pull`, another session's apply) it first
merges the session's changes three-way onto that HEAD (`merge_onto_head`): compared with the
real files alone, the branch's new lines read as removed by the session, and `--patch` and
`--worktree` wrote them back out. A conflict there changes nothing; `diff` notes it and shows
the session's side.

`--commit` lands on the session's branch, or `--branch B` (a new branch starts at the session's
base; a session on a detached HEAD needs one). `apply_commit` settles who commits before it
builds anything, so a missing identity writes no commit objects. The base moves to the new
commit when it is on the session's own branch or on the one its worktree has checked out; the
applied paths leave the delta only when that worktree was updated, since otherwise the view
must still show them. Commits made inside the session (`services/session_git.py`) go first,
promoted and replayed (`git/replay.py`). A session whose own HEAD is on another branch is
refused unless `--branch` names the target, and its HEAD, index and branch ref are handed back
to the real repository only when that HEAD is on the target (`SessionGit.stale_after_apply`),
so a branch made inside is never taken from it. When the branch has the session's HEAD already
(merged outside), the changes go on the tip with that HEAD as their base
(`session_git.reached`); a path a session commit changed that the view shows as the worktree
has it is committed as the view has it (`session_git.reverted_in_view`). `squash` needs none of
this: the real worktree is still at the base, so the view's changes against it hold every
commit, and one commit takes them. A branch that moves under the apply is retried
(`_MOVED_TRIES`), then reported.

`--patch` and `--worktree` compare the view with the real worktree, so the commits' changes are
in them and no branch moves; `--patch --mbox` writes one mail per session commit, then one for
the changes since (`git/commit_mails.py`), which `git am` applies on the base.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gitsess.errors import GitsessError, option

# Change is what a command shows of each path (the cli meets it here, not in the git layer).
from gitsess.git.changes import Change as Change
from gitsess.git.changes import ChangeSet, compute_changes
from gitsess.git.diff import DiffResult, diff_changes
from gitsess.git.pathspec import Pathspec

# who a commit is by, as the cli gives it
from gitsess.git.repo import Person as Person
from gitsess.git.repo import RepoContext, Repository
from gitsess.git.scratch import scratch_repo
from gitsess.overlay.view import OverlayView
from gitsess.services.apply_journal import (
    PreparedApply,
    new_journal,
    prepare,
    read_journal,
    reconcile,
    remove_journal,
    settle,
    write_journal,
)
from gitsess.services.handle import SessionHandle
from gitsess.services.real_tree import open_real, real_root
from gitsess.store.registry import Session

# The git layer's apply and archive modules are imported where they are used: diff, the most
# frequent command here, needs neither, and loading them is about 12 ms of its start.
if TYPE_CHECKING:
    from gitsess.git.apply_commit import CommitResult
    from gitsess.git.conflicts import Conflict

    # the patch an apply returns, which the cli writes out
    from gitsess.git.patch import PatchResult as PatchResult
    from gitsess.services.gate import TestRun
    from gitsess.services.session_git import SessionGit


# ---------------------------------------------------------------------------------------------
# diff


def diff(
    ctx: RepoContext,
    session: Session | SessionHandle,
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

    handle = SessionHandle.of(ctx, session)
    session = handle.row
    done = reconcile(ctx, handle)
    root = real_root(session)
    repo = open_real(session, root)
    notes = list(done.notes)
    with handle.view(root) as view, scratch_repo(repo) as scratch:
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
        git = session_git.own_commits(view, repo, session, root)
    notes += repos_note(changes)
    left = [p for p in left_out_by_git(changes) if p not in changes.repos]
    if left:
        notes.append(f"not in the diff (git does not carry these changes): {', '.join(left)}")
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
    test: TestRun | None = None  # a gated apply's test (`services/gate.py`)
    # Sessions (names) that conflict with the branch now that this apply landed on it.
    now_conflicts: tuple[str, ...] = ()
    # what reached the branch: the session's commits as they are (a fast-forward) or as new
    # commits (replayed), then one new commit of the changes on top (None: none was needed)
    fast_forward: bool = False
    replayed: tuple[str, ...] = ()
    new_commit: str | None = None
    new_commit_paths: int = 0

    @property
    def ok(self) -> bool:
        return not self.conflicts and (self.test is None or self.test.passed)

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
            "base_commit": self.base,
            "notes": list(self.notes),
            "promoted": list(self.promoted),
            "fast_forward": self.fast_forward,
            "replayed": list(self.replayed),
            "new_commit": self.new_commit,
            "new_commit_paths": self.new_commit_paths,
        }
        if self.commit is not None:
            c = self.commit
            data.update(
                commit=c.commit, branch=c.branch, parent=c.parent, tree=c.tree, merged=c.merged,
                worktree_updated=c.worktree_updated,
            )  # fmt: skip
        if self.patch is not None:
            data["patch_paths"] = list(self.patch.paths)
        if self.test is not None:
            data["test"] = self.test.to_json()
        if self.target == "commit":
            data["now_conflicts"] = list(self.now_conflicts)
        return data


def apply_to_commit(
    ctx: RepoContext,
    session: Session | SessionHandle,
    pathspecs: Sequence[str] = (),
    *,
    message: str,
    branch: str | None = None,
    author: Person | None = None,
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
    from gitsess.git.reflock import Held, Moved
    from gitsess.git.trees import valid_branch_name

    if branch is not None and not valid_branch_name(branch):
        raise GitsessError(f"{option('branch')} {branch!r} is not a valid branch name")
    with prepare(ctx, session) as p:
        for attempt in range(_MOVED_TRIES):
            try:
                return _apply_to_commit(
                    ctx, p, pathspecs, message=message, branch=branch, author=author,
                    include_ignored=include_ignored, force=force, dry_run=dry_run, squash=squash,
                )  # fmt: skip
            except (Moved, Held) as e:
                # nothing was written: the locks are taken before any real file is
                remove_journal(p.handle)
                if isinstance(e, Held) or attempt == _MOVED_TRIES - 1:
                    raise
    raise AssertionError("unreachable")


# A branch that moves under an apply this many times in a row is a busy one: say so rather
# than go on chasing it.
_MOVED_TRIES = 3


def _apply_to_commit(
    ctx: RepoContext,
    p: PreparedApply,
    pathspecs: Sequence[str],
    *,
    message: str,
    branch: str | None,
    author: Person | None,
    include_ignored: bool,
    force: bool,
    dry_run: bool,
    squash: bool,
) -> Applied:
    from gitsess.git.apply_commit import apply_commit, branch_tip
    from gitsess.git.conflicts import Conflict
    from gitsess.git.patch import left_out_by_git
    from gitsess.git.trees import changed_between, paths_changed
    from gitsess.services import session_git

    target = branch or p.session.branch
    if target is None:
        raise GitsessError(
            f"session {p.session.name} is on a detached HEAD; give {option('branch')} to commit on"
        )
    with (
        p.handle.view(p.root) as view,
        scratch_repo(p.repo, view.own_objects()) as scratch,
    ):
        changes = compute_changes(
            view, p.repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
        )
        on_own_branch = target.removeprefix("refs/heads/") == p.session.branch
        git = session_git.state(view, p.repo, p.session, p.root)
        commits = git if git is not None and git.commits else None
        if commits is not None and commits.off_branch and branch is None:
            on = (commits.head.branch or "a detached HEAD").removeprefix("refs/heads/")
            raise GitsessError(
                f"session {p.session.name}'s git is on {on}, not on its branch "
                f"{p.session.branch}: give {option('branch')} to apply its commits onto a branch"
            )
        full = target if target.startswith("refs/") else "refs/heads/" + target
        stale_git = git.stale_after_apply(full) if git is not None else []
        notes = [*p.notes, *repos_note(changes)]
        if git is not None and git.below_base:
            notes.append(
                f"the session's HEAD is {git.below_base} commit(s) below its base (a git reset "
                "inside): the commit takes the files as the view has them"
            )
        replayed_tip = reverted = None
        made: dict[str, Any] = {}
        base = p.session.base_commit
        # read once: the replay is built on it, and the ref is swapped against it
        tip = branch_tip(p.repo, target)
        if commits is not None and not squash:
            # (squashed, they are part of the view's changes against the real worktree,
            # which is still at the session's base: one commit takes them all)
            # The commits' objects are the session's: copied into the real store first
            # (not on a dry run, which replays in the scratch repository's memory).
            if not dry_run:
                session_git.promote(scratch, p.repo, commits)
            objects = scratch if dry_run else p.repo
            promoted = session_git.replay(p.repo, commits, tip or base, objects)
            if promoted.conflicts:
                return Applied(
                    "commit", dry_run, (), (), tuple(
                        Conflict(path, "merge", "changed on the branch and in a session commit")
                        for path in promoted.conflicts
                    ), base=base, notes=tuple(notes),
                )  # fmt: skip
            replayed_tip, base = promoted.tip, commits.commits[-1]
            made = {"fast_forward": promoted.fast_forward, "replayed": promoted.commits}
            reverted = session_git.reverted_in_view(
                scratch, view, commits, set(changes.paths), Pathspec(pathspecs)
            )
        elif git is not None and not squash and session_git.reached(scratch, git, tip, base):
            # its commits are on the branch already (a fork applied, a `git merge` of them):
            # the view's changes are on top of its HEAD, not of its base
            replayed_tip, base = tip, git.head.commit

        def journal(result: CommitResult) -> None:
            move = on_own_branch or result.worktree_updated
            applied = result.applied if result.worktree_updated else ()
            keep = [*result.skipped, *changes.excluded]
            data = new_journal(
                "commit", changes, applied, keep, result=result,
                base=result.commit or result.parent, move_base=move,
            )  # fmt: skip
            if result.worktree_updated and stale_git:
                data.drop += stale_git
                data.expect.update(dict.fromkeys(stale_git))
            write_journal(p.handle, data)

        result = apply_commit(
            p.repo, view, changes, branch=target, base=base,
            message=message, author=author, force=force, dry_run=dry_run,
            on_prepared=journal, scratch=scratch, replayed_tip=replayed_tip, reverted=reverted,
            tip=tip,
        )  # fmt: skip
        if dry_run and result.parent is not None and result.tree is not None:
            # what a new commit would change: the session's replayed commits may hold it all
            made["new_commit_paths"] = len(changed_between(scratch, result.parent, result.tree))
    if result.commit is not None and result.commit != replayed_tip:
        made["new_commit"] = result.commit
        made["new_commit_paths"] = paths_changed(p.repo, result.commit)
    if result.worktree_updated and result.ok:
        uncarried = set(left_out_by_git(changes))
        only = [path for path in result.applied if path in uncarried]
        if only:
            would = "would be " if dry_run else ""
            notes.append(
                f"{would}written to the worktree, not committed (git does not carry these "
                f"changes): {', '.join(only)}"
            )
    outcome = Applied(
        "commit", dry_run, result.applied, result.skipped, result.conflicts,
        commit=result, base=p.session.base_commit, notes=tuple(notes),
        promoted=commits.commits if commits is not None else (), squashed=squash, **made,
    )  # fmt: skip
    if not result.ok or dry_run or not p.handle.journal.exists():
        return outcome
    journal_data = read_journal(p.handle)
    dropped, kept = settle(p.handle, p.root, journal_data, result.changed_dirs)
    base = journal_data.base if journal_data.move_base else p.session.base_commit
    return replace(outcome, dropped=tuple(dropped), kept=tuple(kept), base=base)


def apply_to_patch(
    ctx: RepoContext,
    session: Session | SessionHandle,
    pathspecs: Sequence[str] = (),
    *,
    mbox: bool = False,
    message: str = "",
    author: Person | None = None,
    include_ignored: bool = False,
    dry_run: bool = False,
) -> Applied:
    """A patch of the session's changes against its real worktree; the session stays as is.

    With `mbox` and commits made inside the session: a mail per commit, then one for the
    changes made since (what `git am` applies on the session's base)."""
    from gitsess.git.merge import merge_onto_head
    from gitsess.git.objects import person
    from gitsess.git.patch import make_patch, spooled
    from gitsess.services import session_git

    with (
        prepare(ctx, session) as p,
        p.handle.view(p.root) as view,
        scratch_repo(p.repo, view.own_objects()) as scratch,
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
        git = session_git.own_commits(view, p.repo, p.session, p.root) if mbox else None
        if git is not None:
            author = author or person(p.repo, "AUTHOR")
            mails = _commit_mails(
                scratch, view, changes, git, pathspecs, message=message, author=author
            )
            result = replace(result, body=spooled(mails))
    applied = tuple(c.path for c in changes.changes if c.path not in set(result.skipped))
    return Applied(
        "patch", dry_run, applied, result.skipped, (), patch=result,
        base=p.session.base_commit, notes=(*p.notes, *repos_note(changes)),
    )  # fmt: skip


def repos_note(changes: ChangeSet) -> list[str]:
    """What git, too, leaves alone: a nested repository is written through and deleted by
    no apply, and a `.git` by another spelling is no content."""
    if not changes.repos:
        return []
    return [
        "left in the session, as git leaves them (a repository of its own, or a name git "
        f"refuses): {', '.join(changes.repos)}"
    ]


def _commit_mails(
    scratch: Repository,
    view: OverlayView,
    changes: ChangeSet,
    git: SessionGit,
    pathspecs: Sequence[str],
    *,
    message: str,
    author: Person,
) -> bytes:
    from gitsess.git.commit_mails import changes_mail, commit_mail
    from gitsess.services import session_git

    reverted = session_git.reverted_in_view(
        scratch, view, git, set(changes.paths), Pathspec(pathspecs)
    )
    mails = [commit_mail(scratch, c) for c in git.commits]
    last = changes_mail(
        scratch, view, changes, git.commits[-1], reverted, message=message, author=author
    )
    return b"".join([*mails, last])


def apply_to_worktree(
    ctx: RepoContext,
    session: Session | SessionHandle,
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

    with prepare(ctx, session) as p:
        with p.handle.view(p.root) as view, scratch_repo(p.repo) as scratch:
            changes = compute_changes(
                view, p.repo, pathspecs=pathspecs, include_ignored=include_ignored, store=scratch
            )
            merged = merge_onto_head(p.repo, scratch, view, changes, p.session.base_commit)
            plan = apply_worktree(
                p.repo, view, changes, force=force, dry_run=True, merged=merged, scratch=scratch
            )
            notes = list(p.notes)
            special = [p for p in changes.special if p not in changes.repos]
            if special:
                notes.append(
                    "left in the session (apply writes no devices, fifos or sockets): "
                    + ", ".join(special)
                )
            notes += repos_note(changes)
            outcome = Applied(
                "worktree", dry_run, plan.applied, plan.skipped, plan.conflicts,
                base=p.session.base_commit, notes=tuple(notes),
            )  # fmt: skip
            if not plan.ok or dry_run or not plan.applied:
                return outcome
            # (a directory holding one stays in the delta, or they would go with it)
            keep = [*plan.skipped, *changes.excluded, *changes.special]
            data = new_journal("worktree", changes, plan.applied, keep)
            write_journal(p.handle, data)
            result = apply_worktree(
                p.repo, view, changes, force=force, merged=merged, scratch=scratch
            )
        if not result.ok:  # the real tree changed between the plan and the writes
            remove_journal(p.handle)
            return replace(outcome, applied=(), conflicts=result.conflicts)
        dropped, kept = settle(p.handle, p.root, data, result.changed_dirs)
        return replace(
            outcome, applied=result.applied, skipped=result.skipped, dropped=tuple(dropped),
            kept=tuple(kept),
        )  # fmt: skip


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
