"""Binding a session to a worktree and branch: the current one, or one gitsess creates.

Default: the current worktree and its branch (on a detached HEAD the branch is NULL and the
base commit records where). `--worktree [BRANCH] [--from REV]` makes a worktree at
`<state>/worktrees/<name>` on a new branch `gitsess/<name>` (or BRANCH: an existing one no
worktree has checked out is used as is), its admin entry `worktrees/gitsess-<name>`, under
`worktrees.lock` so that checking a path and branch free and taking them is one step. `rm`
removes what gitsess created unless it holds work: uncommitted or untracked changes, or commits
no other ref (nor the session's base) reaches; a detached HEAD's own commits are kept as
`refs/gitsess/detached/<worktree>` first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2

from gitsess.errors import GitsessError
from gitsess.git.binding import Binding, NameInUse, WorktreeSpec
from gitsess.git.repo import RepoContext, head_of, open_worktree, worktree_paths

__all__ = [
    "Binding",
    "NameInUse",
    "WorktreeSpec",
    "bind_current",
    "create_worktree",
    "keep_reasons",
    "name_in_use",
    "remove_created",
]

BRANCH_PREFIX = "gitsess/"


def bind_current(ctx: RepoContext) -> Binding:
    """The worktree holding the current directory, on whatever it has checked out."""
    if ctx.worktree is None:
        raise GitsessError(
            f"{ctx.common_dir} has no worktree here (bare repository?); run gitsess inside a "
            "worktree, or pass --worktree to create one"
        )
    head = head_of(open_worktree(ctx.worktree))
    return Binding(ctx.worktree, head.branch, head.commit, False, False)


def name_in_use(ctx: RepoContext, name: str) -> bool:
    """Whether `create_worktree` would find the path or the default branch of `name` taken."""
    if (ctx.worktrees_dir / name).exists():
        return True
    return ctx.open().branches.local.get(BRANCH_PREFIX + name) is not None


def create_worktree(ctx: RepoContext, name: str, spec: WorktreeSpec) -> Binding:
    """A new worktree at `<state>/worktrees/<name>`; undo it with `remove_created`."""
    branch = spec.branch or BRANCH_PREFIX + name
    if not pygit2.reference_is_valid_name("refs/heads/" + branch):
        raise GitsessError(f"{branch!r} is not a valid branch name")
    with _creation_lock(ctx):
        return _create_worktree(ctx, ctx.worktrees_dir / name, branch, spec.from_rev)


@contextmanager
def _creation_lock(ctx: RepoContext) -> Iterator[None]:
    """Serialize worktree creation: checking that a path and branch are free and taking them
    must be one step, or two processes picking the same name would both pass the check."""
    ctx.worktrees_dir.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(ctx.state_dir / "worktrees.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _create_worktree(ctx: RepoContext, path: Path, branch: str, from_rev: str | None) -> Binding:
    if path.exists():
        raise NameInUse(f"{path} already exists")
    repo = ctx.open()
    ref = repo.branches.local.get(branch)
    created_branch = ref is None
    if ref is not None:
        holder = checked_out_at(repo, branch)
        if holder is not None:
            raise GitsessError(f"branch {branch} is already checked out at {holder}")
        if from_rev is not None:
            raise GitsessError(f"branch {branch} already exists; --from only applies to a new one")
    else:
        start = repo[_start_commit(ctx, repo, from_rev)].peel(pygit2.Commit)
        ref = repo.branches.local.create(branch, start)
    try:
        repo.add_worktree(_admin_name(repo, path.name), str(path), ref)
    except (OSError, pygit2.GitError) as e:
        if created_branch:
            ref.delete()
        raise GitsessError(f"cannot create worktree {path}: {e}") from e
    target = ref.target
    assert isinstance(target, pygit2.Oid)
    return Binding(path.resolve(), branch, str(target), True, created_branch)


def checked_out_at(repo: pygit2.Repository, branch: str) -> Path | None:
    """The worktree that has `branch` checked out, if any."""
    for path in worktree_paths(repo):
        if path.is_dir() and head_of(open_worktree(path)).branch == branch:
            return path
    return None


def keep_reasons(ctx: RepoContext, binding: Binding) -> list[str]:
    """Why removing a worktree (and branch) gitsess made would lose work; empty if it would not."""
    reasons = []
    worktree = binding.worktree
    if not worktree.is_relative_to(ctx.worktrees_dir):
        reasons.append(f"{worktree} is outside {ctx.worktrees_dir}")
    elif worktree.is_dir() and open_worktree(worktree).status(untracked_files="normal"):
        reasons.append("the worktree has uncommitted changes")
    if binding.created_branch and binding.branch is not None:
        repo = ctx.open()
        unmerged = unmerged_commits(repo, binding.branch)
        if unmerged:
            reasons.append(f"branch {binding.branch} has {unmerged} commit(s) on no other branch")
    detached = detached_commits(ctx.open(), worktree)
    if detached is not None:
        reasons.append(f"its detached HEAD has {detached[1]} commit(s) that no ref reaches")
    return reasons


DETACHED_PREFIX = "refs/gitsess/detached/"


def detached_commits(repo: pygit2.Repository, worktree: Path) -> tuple[str, int] | None:
    """The worktree's detached HEAD and how many commits it has that no ref reaches (made
    there after `git checkout --detach`, or left when its branch was deleted): deleting the
    worktree would leave them to git's pruning. None when there are none."""
    if not (worktree / ".git").exists():
        return None
    try:
        here = open_worktree(worktree)
        if not here.head_is_detached:
            return None
        head = here.head.peel(pygit2.Commit).id
    except (pygit2.GitError, KeyError, ValueError, GitsessError):
        return None
    walker = repo.walk(head)
    for other in repo.references.iterator():
        try:
            walker.hide(other.peel(pygit2.Commit).id)
        except (pygit2.GitError, ValueError, KeyError):
            continue
    count = sum(1 for _ in walker)
    return (str(head), count) if count else None


def keep_detached(repo: pygit2.Repository, worktree: Path) -> str | None:
    """A ref for the worktree's detached commits no ref reaches, before it is deleted; the
    ref's name, None when there were none."""
    detached = detached_commits(repo, worktree)
    if detached is None:
        return None
    ref = DETACHED_PREFIX + worktree.name
    for n in range(2, 10_000):
        try:
            repo.create_reference_direct(ref, detached[0], False, message="gitsess rm: keep HEAD")
        except pygit2.AlreadyExistsError:
            ref = f"{DETACHED_PREFIX}{worktree.name}-{n}"
            continue
        return ref
    raise GitsessError(f"too many refs under {DETACHED_PREFIX}; delete some")


def unmerged_commits(repo: pygit2.Repository, branch: str) -> int:
    """Commits of `branch` that no other ref reaches. (Not the session's base: `apply --commit`
    moves it to the commit it made, which may be on this branch alone.)"""
    ref = repo.branches.local.get(branch)
    if ref is None:
        return 0
    walker = repo.walk(ref.target)
    for other in repo.references.iterator():
        if other.name == ref.name:
            continue
        try:
            walker.hide(other.peel(pygit2.Commit).id)
        except (pygit2.GitError, ValueError, KeyError):
            continue  # a symbolic ref to nowhere, or a tag of a tree or blob: reaches no commit
    return sum(1 for _ in walker)


def remove_created(ctx: RepoContext, binding: Binding) -> None:
    """Delete a worktree gitsess made, its git admin entry, and the branch if gitsess made it."""
    try:
        repo = ctx.open()
        if binding.worktree.exists():
            shutil.rmtree(binding.worktree)
        for name in repo.list_worktrees():
            worktree = repo.lookup_worktree(name)
            if Path(worktree.path).resolve() == binding.worktree:
                worktree.prune(True)
        if binding.created_branch and binding.branch is not None:
            ref = repo.branches.local.get(binding.branch)
            if ref is not None:
                ref.delete()
    except (OSError, pygit2.GitError) as e:
        raise GitsessError(f"cannot remove worktree {binding.worktree}: {e}") from e


def _start_commit(ctx: RepoContext, repo: pygit2.Repository, rev: str | None) -> pygit2.Oid:
    # HEAD and revisions relative to it mean the current worktree's HEAD, as with git.
    here = open_worktree(ctx.worktree) if ctx.worktree is not None else repo
    try:
        commit = here.revparse_single(rev or "HEAD").peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError, pygit2.InvalidSpecError) as e:
        if rev is None:
            raise GitsessError("HEAD has no commit yet; commit first or pass --from REV") from e
        raise GitsessError(f"--from {rev}: no such commit") from e
    return commit.id


def _admin_name(repo: pygit2.Repository, name: str) -> str:
    """A name for `.git/worktrees/<admin>` that no existing worktree uses."""
    taken = set(repo.list_worktrees())
    admin = f"gitsess-{name}"
    n = 1
    while admin in taken:
        n += 1
        admin = f"gitsess-{name}-{n}"
    return admin
