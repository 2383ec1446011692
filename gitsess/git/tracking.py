"""How a session's branch and worktree stand in git now: what the hooks and `gc` look at.

Everything here reads the repository as it is at the moment of the call; none of it remembers
an event. That keeps the sweeps built on it idempotent, and correct however late they run.

Checked out counts a branch being rebased or bisected (git detaches HEAD for the operation
only). A rename (`git branch -m` deletes the old ref, parks its reflog, then writes the new ref
with no hook) is followed through the reflog line git moves along, once it is done. Merged: a
target branch reaches the session branch's tip and the branch carries work done since the
session began (its tip moved from the base, or its reflog shows it moved since it was created;
clocks only when git kept no reflog). A default branch is never "merged" into anything; squash
merges are not recognised. When the worktree is gone, `stand_in` is a throwaway repository
borrowing the objects through `alternates` and holding the branch tip's files, so the view can
still be archived. Committed in the real tree (`settled_paths`): a touched path whose view
content equals both the real worktree and the branch's commit (blob ids and modes) can leave the
delta without the session seeing a change; a commit made inside a session leaves the real
worktree behind the branch, so its paths stay.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy, ObjectType

from gitsess.git.blobid import blob_id
from gitsess.git.changes import (
    GIT_EXEC,
    GIT_FILE,
    GIT_LINK,
    compute_changes,
    touched_roots,
)
from gitsess.git.repo import Head, common_dir, head_of, open_worktree, worktree_paths
from gitsess.git.view import SessionView, Stamp

HEADS = "refs/heads/"
# While `git branch -m` runs, git 2.39 deletes the old ref (running the reference-transaction
# hook), parks its reflog here, and only then writes the new ref, without a hook.
RENAME_LOG = Path("logs") / "refs" / ".tmp-renamed-log"
DEFAULT_BRANCHES = ("main", "master")


def checked_out(worktree: Path) -> Head:
    """What `worktree` has checked out. A branch being rebased (or bisected) counts as checked
    out: git detaches HEAD only for the length of the operation and comes back to it."""
    repo = open_worktree(worktree)
    head = head_of(repo)
    if head.branch is not None:
        return head
    git_dir = Path(repo.path)
    for name in ("rebase-merge/head-name", "rebase-apply/head-name"):
        ref = _first_line(git_dir / name)
        if ref is not None and ref.startswith(HEADS):
            return Head(ref.removeprefix(HEADS), head.commit)
    # BISECT_START holds the branch bisect started from (or a commit id when detached).
    start = _first_line(git_dir / "BISECT_START")
    if start and repo.branches.local.get(start) is not None:
        return Head(start, head.commit)
    return head


def _first_line(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def tip(repo: pygit2.Repository, branch: str) -> pygit2.Commit | None:
    """The commit `branch` points at; None when there is no such branch (or it has no commit)."""
    ref = repo.branches.local.get(branch)
    if ref is None:
        return None
    try:
        return ref.peel(pygit2.Commit)
    except (pygit2.GitError, ValueError, KeyError):
        return None


def tip_id(repo: pygit2.Repository, branch: str) -> str | None:
    """The id of `tip`: None when there is no such branch (or it has no commit)."""
    found = tip(repo, branch)
    return None if found is None else str(found.id)


def merged_into(
    repo: pygit2.Repository,
    branch: str,
    target: str,
    before: str | None,
    base: str | None,
    created: float,
) -> bool:
    """Whether `branch` (a session's, which started at `base` at the time `created`) was
    merged into `target`, and not already before it moved to `before` (None: not known)."""
    branch_tip = tip(repo, branch)
    target_tip = tip(repo, target)
    if branch_tip is None or target_tip is None:
        return False
    tip_id = branch_tip.id
    if tip_id != target_tip.id and not repo.descendant_of(target_tip.id, tip_id):
        return False
    if before is not None and (str(tip_id) == before or repo.descendant_of(before, tip_id)):
        return False
    if str(tip_id) != base:
        return True
    # At the session's base: merged only if that base is work on the branch (an apply moved
    # both there), not the commit the branch was made from. The graph of ref updates says
    # which; the clocks (a commit's whole seconds, a creation time's fraction: they missed a
    # merge when `new` and `apply` fell in one second) only when git kept no reflog.
    moved = moved_since_created(repo, branch)
    if moved is not None:
        return moved
    return branch_tip.commit_time > created


def branch_gone(repo: pygit2.Repository, branch: str) -> bool:
    """Whether `branch` was deleted: no ref, and no worktree on it as an unborn branch (a new
    repository's first branch has no ref until its first commit)."""
    if repo.branches.local.get(branch) is not None:
        return False
    for path in worktree_paths(repo):
        if path.is_dir() and head_of(open_worktree(path)) == Head(branch, None):
            return False
    return True


def moved_since_created(repo: pygit2.Repository, branch: str) -> bool | None:
    """Whether `branch` points elsewhere than where it was created (a commit, an apply, a
    merge moved it): from its reflog, which records each update of the ref in order, so no
    clock is read. None when the reflog does not go back to the creation (reflogs off,
    expired, or a branch fetched or renamed into being)."""
    try:
        ref = repo.references[HEADS + branch]
        entries = list(ref.log())
    except (pygit2.GitError, KeyError):
        return None
    if not entries or entries[-1].oid_old != pygit2.Oid(hex="0" * len(str(ref.target))):
        return None
    return entries[-1].oid_new != ref.target


def rename_in_progress(common: Path) -> bool:
    """A `git branch -m` is between deleting the old name and writing the new one."""
    return (common / RENAME_LOG).exists()


def renamed_to(repo: pygit2.Repository, branch: str) -> str | None:
    """The branch that `branch` was renamed to, found in the reflog git moves along with a
    rename ("Branch: renamed refs/heads/OLD to refs/heads/NEW"); None when it was not renamed
    (or reflogs are off)."""
    wanted = f"renamed {HEADS}{branch} to {HEADS}"
    for name in repo.branches.local:
        try:
            entries = repo.references[HEADS + name].log()
            if any(wanted in (entry.message or "") for entry in entries):
                return str(name)
        except (pygit2.GitError, KeyError):
            continue  # no reflog for this branch
    return None


def default_branches(repo: pygit2.Repository) -> set[str]:
    """The branches work is merged into: `init.defaultBranch`, main, master (those that exist),
    and whatever the main worktree has checked out."""
    names = set(DEFAULT_BRANCHES)
    with suppress(KeyError):
        names.add(str(repo.config["init.defaultBranch"]))
    found = {name for name in names if repo.branches.local.get(name) is not None}
    if not repo.is_bare and repo.workdir is not None:
        main = Path(repo.workdir)
        if main.is_dir():
            branch = checked_out(main).branch
            if branch is not None:
                found.add(branch)
    return found


def worktree_gone(repo: pygit2.Repository, path: Path) -> bool:
    """Whether the worktree at `path` was removed: the directory is gone and git no longer
    lists it, or lists it as prunable (deleted without `git worktree remove`, and not locked;
    a locked worktree may be on a disk that is away for now)."""
    if path.exists():
        return False
    for name in repo.list_worktrees():
        try:
            worktree = repo.lookup_worktree(name)
        except pygit2.GitError:
            continue
        if os.path.realpath(worktree.path) == os.path.realpath(path):
            return bool(worktree.is_prunable)
    return True


@dataclass(frozen=True)
class RefUpdate:
    """One line of the reference-transaction hook's input."""

    old: str
    new: str
    ref: str

    @property
    def deletes_branch(self) -> bool:
        return self.ref.startswith(HEADS) and set(self.new) == {"0"}


def parse_ref_updates(text: str) -> list[RefUpdate]:
    updates = []
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            updates.append(RefUpdate(*parts))
    return updates


def parse_rewrites(text: str) -> dict[str, str]:
    """post-rewrite's input: `<old> <new> [<extra>]` per rewritten commit."""
    rewrites = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rewrites[parts[0]] = parts[1]
    return rewrites


@contextmanager
def stand_in(repo: pygit2.Repository, commit: str | None, parent: Path) -> Iterator[Path]:
    """A throwaway worktree (inside `parent`) holding `commit`'s files, in a repository that
    borrows `repo`'s objects, ignore rules and configuration. Yields its directory.

    It stands for a worktree that was removed: git refuses to remove one with uncommitted
    changes, so it held its commit's files, and a session's view over it can be compared again.
    """
    top = Path(tempfile.mkdtemp(prefix="stand-in-", dir=parent))
    try:
        borrowed = pygit2.init_repository(str(top))
        git_dir = Path(borrowed.path)
        (git_dir / "objects" / "info" / "alternates").write_text(
            f"{common_dir(repo) / 'objects'}\n"
        )
        exclude = common_dir(repo) / "info" / "exclude"
        if exclude.is_file():
            (git_dir / "info").mkdir(exist_ok=True)
            shutil.copyfile(exclude, git_dir / "info" / "exclude")
        if commit is not None:
            borrowed = pygit2.Repository(str(top))  # opened again to see the alternates
            tree = borrowed[commit].peel(pygit2.Tree)
            # pygit2 leaves checkout_tree unannotated
            borrowed.checkout_tree(tree, strategy=CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
            borrowed.index.read_tree(tree)
            borrowed.index.write()
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


# every entry below a path, as the view shows it
Stamps = dict[str, Stamp]


@dataclass(frozen=True)
class Settled:
    """A touched path of the session (a touched directory stands for its subtree) whose content
    is the same in the view, the real worktree and the commit: the delta holds nothing there
    that git does not."""

    path: str
    stamps: Stamps  # to tell that the session wrote to it after it was found settled


def settled_paths(view: SessionView, repo: pygit2.Repository, commit: str) -> list[Settled]:
    """The session's touched paths that `commit` took: dropping them from the delta changes
    nothing the session sees. `repo` is opened on the session's real worktree."""
    differing = {c.path for c in compute_changes(view, repo, include_ignored=True).changes}
    tree = repo[commit].peel(pygit2.Tree)
    settled = []
    for path in touched_roots(view.touched_paths()):
        if path == "" or any(_within(d, path) for d in differing):
            continue
        stamps: Stamps = {}
        entries = _view_entries(view, path, stamps)
        if entries is not None and entries == _tree_entries(repo, tree, path):
            settled.append(Settled(path, stamps))
    return settled


def stamps_of(view: SessionView, path: str) -> Stamps:
    stamps: Stamps = {}
    _view_entries(view, path, stamps)
    return stamps


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _view_entries(
    view: SessionView, path: str, stamps: Stamps
) -> dict[str, tuple[str, int]] | None:
    """Git's (blob id, mode) of every file and symlink at or below `path` in the view; None
    when something there is nothing git can hold (a fifo, a socket)."""
    found: dict[str, tuple[str, int]] = {}
    pending = [path]
    while pending:
        current = pending.pop()
        entry = view.entry(current)
        if entry is None:
            continue
        stamps[current] = Stamp(entry.mode, entry.size, entry.mtime_ns)
        if entry.kind == "dir":
            pending += [f"{current}/{name}" for name in view.listdir(current)]
        elif entry.kind == "symlink":
            target = os.fsencode(view.readlink(current))
            found[current] = (str(blob_id(target)), GIT_LINK)
        elif entry.kind == "file":
            mode = GIT_EXEC if entry.mode & stat.S_IXUSR else GIT_FILE
            found[current] = (str(blob_id(view.read(current))), mode)
        else:
            return None
    return found


def _tree_entries(
    repo: pygit2.Repository, tree: pygit2.Tree, path: str
) -> dict[str, tuple[str, int]]:
    try:
        top = tree[path]
    except KeyError:
        return {}
    found: dict[str, tuple[str, int]] = {}
    pending: list[tuple[str, pygit2.Object]] = [(path, top)]
    while pending:
        at, obj = pending.pop()
        if obj.type == ObjectType.TREE:
            subtree = repo[obj.id]
            assert isinstance(subtree, pygit2.Tree)
            pending += [(f"{at}/{child.name}", child) for child in subtree]
        else:
            # a blob, or a submodule's commit (which no view entry matches)
            found[at] = (str(obj.id), int(obj.filemode))
    return found
