"""A session's own git state: where its HEAD is, and the commits it made that its branch lacks.

The view's `.git` is copy-on-write (see docs/ARCHITECTURE.md, "git inside a session"), objects
included, so git run inside a session commits to the session's refs, into the session's own
object store. These are the services that read that state back for `show`, `ls` and `apply`,
and that copy the objects of its commits into the real repository when they leave the session.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gitsess.errors import GitsessError
from gitsess.git.head import SessionHead, read_head, real_refs
from gitsess.store.registry import Session

# `ls` reads what a count depends on (`GitRefs`) without pygit2, and counts only when that
# changed (`services/counts.py`); nor does it load apply's machinery.
if TYPE_CHECKING:
    from gitsess.git.archive_commits import ArchiveInfo
    from gitsess.git.pathspec import Pathspec
    from gitsess.git.replay import Replayed
    from gitsess.git.repo import Repository
    from gitsess.git.scratch import ScratchRepository
    from gitsess.git.view import SessionView
    from gitsess.overlay.gitdir import GitLayout
    from gitsess.overlay.view import OverlayView

# What a replay makes stale in the session's `.git`: with the branch and the real index at
# the replayed commits, the session follows the real ones again.
_FOLLOWED_AFTER_APPLY = ("HEAD", "index", "ORIG_HEAD", "COMMIT_EDITMSG", "logs/HEAD")


@dataclass(frozen=True)
class SessionGit:
    head: SessionHead
    # the session's own commits (reachable from its HEAD, from no real ref and not from its
    # base), oldest first; `chain` is those on its HEAD's first-parent line, what a replay takes
    commits: tuple[str, ...]
    chain: tuple[str, ...]
    layout: GitLayout  # where the view keeps its git state
    branch: str | None  # the session's branch, as a full ref
    behind: int  # commits of the real branch the session's HEAD lacks
    below_base: int  # commits of the base the session's HEAD lacks when it is an ancestor

    @property
    def off_branch(self) -> bool:
        """Whether the session's HEAD is on another branch than the session's (or detached)."""
        return self.branch is not None and self.head.branch != self.branch

    def stale_after_apply(self, target: str) -> list[str]:
        """Paths of the session's `.git` that an apply of its commits onto `target` (a full
        ref) hands back to the real repository (as view paths): HEAD, the index and the
        branch's ref together (overlay/gitunit.py), and only when HEAD is on `target`: a
        branch made in the session, or an index on another, stays the session's."""
        return self.unit_paths(target) if self.head.branch == target else []

    def unit_paths(self, branch: str | None) -> list[str]:
        """HEAD, the index (and what goes with them) and `branch`'s ref and log, as view
        paths: dropped together, the session's git follows the real repository again."""
        paths = [self.layout.path(r) for r in _FOLLOWED_AFTER_APPLY]
        if branch is not None:
            paths += [self.layout.path("common/" + r) for r in (branch, "logs/" + branch)]
        return paths


def real_common(root: Path, worktree: Path) -> Path:
    """The real repository's common dir as this process reaches it, given the real worktree
    as reached (`real_tree.real_root`: through the daemon's root from inside a session)."""
    dotgit = root / ".git"
    if dotgit.is_dir():
        return dotgit
    try:
        admin = dotgit.read_text().strip().removeprefix("gitdir: ")
        prefix = str(root)[: len(str(root)) - len(str(worktree))]
        admin_dir = Path(prefix + admin) if os.path.isabs(admin) else root / admin
        common = (admin_dir / "commondir").read_text().strip()
    except OSError as e:
        raise GitsessError(f"cannot read the git dir of {worktree}: {e}") from e
    return Path(os.path.normpath(admin_dir / common))


class GitRefs(NamedTuple):
    """What the session's git state follows from, read from files: its HEAD, the real tips
    that hide commits from it (and its base), its branch and that branch's real tip. The
    commits are the same for the same refs: objects never change."""

    head: SessionHead
    layout: GitLayout  # see `SessionGit.layout`
    branch: str | None
    tip: str | None
    hide: tuple[str, ...]

    @property
    def off_branch(self) -> bool:
        """Whether the session's HEAD is on another branch than the session's (or detached)."""
        return self.branch is not None and self.head.branch != self.branch


def refs_of(view: OverlayView, session: Session, root: Path) -> GitRefs | None:
    """The refs of `state`, without loading pygit2; None while the session never changed its
    `.git`."""
    if not view.touched_git():
        return None
    return _refs(view, session, real_common(root, session.worktree))


def refs_without_worktree(view: OverlayView, session: Session, common: Path) -> GitRefs | None:
    """`refs_of` for a session whose worktree is gone, its view laid over a stand-in
    (`git/tracking.stand_in`) that has none of its git state: `common` is the real common
    dir. (Such a worktree was a linked one, a main worktree takes its repository with it:
    the view keeps the layout its `.git` file recorded, `gitdir.linked_git`.)"""
    return _refs(view, session, common) if view.touched_git() else None


def _refs(view: OverlayView, session: Session, real: Path) -> GitRefs:
    # HEAD is the worktree's own, branches and packed-refs are shared (`GitLayout.path`)
    def read(rel: str) -> bytes | None:
        return view.read_git(rel if rel == "HEAD" else "common/" + rel)

    head = read_head(read)
    refs = real_refs(real)
    branch = None if session.branch is None else "refs/heads/" + session.branch
    tip = refs.get(branch) if branch is not None else None
    hide = (*refs.values(), *([session.base_commit] if session.base_commit else []))
    return GitRefs(head, view.git, branch, tip, hide)


def state(
    view: OverlayView,
    repo: Repository,
    session: Session,
    root: Path,
    refs: GitRefs | None = None,
) -> SessionGit | None:
    """The session's git state; None while it never changed its `.git` (then it is the real
    repository's, and has no commits of its own). `root` is the real worktree as reached
    (`real_tree.real_root`); the real refs are read from its files, so the answer is the same
    inside the session (where `repo` is the view's) and outside. `refs`: `refs_of`'s answer,
    when the caller read it already."""
    from gitsess.git.repo import descends
    from gitsess.git.scratch import scratch_repo
    from gitsess.git.session_refs import commits_not_in, count_between, first_parent_chain

    refs = refs or refs_of(view, session, root)
    if refs is None:
        return None
    head, layout, branch, tip, hide = refs
    below = 0
    base = session.base_commit
    # the commits' objects are the session's own, read through its view
    with scratch_repo(repo, view.own_objects()) as objects:
        commits = commits_not_in(objects, head.commit, hide)
        if head.commit not in (None, base) and base is not None and not commits:
            assert head.commit is not None
            if descends(objects, base, head.commit):
                below = count_between(objects, base, head.commit)
        return SessionGit(
            head,
            tuple(commits),
            tuple(first_parent_chain(objects, commits)),
            layout,
            branch,
            count_between(objects, tip, head.commit),
            below,
        )


def own_commits(
    view: OverlayView, repo: Repository, session: Session, root: Path
) -> SessionGit | None:
    """The session's git state when it has commits of its own (its HEAD is the last of
    them), else None."""
    git = state(view, repo, session, root)
    return git if git is not None and git.commits else None


def files_for_head(repo: Repository, session: Session, head: str) -> dict[str, bytes]:
    """The files of a session's git state (as `GitLayout.path` names them) that make its
    branch end at `head` (commits made inside it, brought by `pull`): the branch's loose ref,
    and an index of `head`'s tree (with no stat data: git checks each file's content once,
    then records it)."""
    assert session.branch is not None
    ref = "common/refs/heads/" + session.branch
    from gitsess.git.trees import index_of

    return {ref: head.encode() + b"\n", "index": index_of(repo, head)}


def reached(repo: Repository, git: SessionGit, tip: str | None, base: str | None) -> bool:
    """Whether the session's HEAD is past its base and the branch's `tip` has it."""
    from gitsess.git.repo import descends

    head = git.head.commit
    if head is None or tip is None or head == base:
        return False
    ahead = base is None or descends(repo, head, base)
    return ahead and (head == tip or descends(repo, tip, head))


def restored_git(
    repo: Repository, session: Session, info: ArchiveInfo, store: Path
) -> dict[str, bytes]:
    """The files of a restored session's git state that bring back the commits made inside the
    archived one (`info.head`): its branch ending at them. Their objects are written into the
    session's object store `store` first (the archive that kept them reachable goes with the
    restore, and the real repository's gc must not take them from the session)."""
    from gitsess.git.objects import write_objects
    from gitsess.git.session_objects import needed_objects, tree_objects
    from gitsess.git.session_refs import commits_not_in

    assert info.head is not None
    commits = commits_not_in(repo, info.head, [info.base] if info.base else [])
    base_objects = tree_objects(repo, info.base)
    write_objects(repo, needed_objects(repo, commits, base_objects.__contains__), store)
    if session.branch is not None:
        return files_for_head(repo, session, info.head)
    return {"HEAD": info.head.encode() + b"\n"}


def replay(repo: Repository, git: SessionGit, onto: str | None, objects: Repository) -> Replayed:
    """The session's commits rebuilt on `onto` (or a fast-forward to them); no ref moves.
    `objects` is where they are read and the rebuilt ones written: the real repository once
    they are promoted (`promote`), a scratch repository over it for a dry run."""
    from gitsess.git.objects import signature
    from gitsess.git.replay import replay_commits

    return replay_commits(
        objects,
        git.chain,
        onto,
        committer=signature(repo, "COMMITTER"),
    )


def promote(scratch: ScratchRepository, repo: Repository, git: SessionGit) -> int:
    """Copy into the real object store exactly the objects the session's commits need that
    it lacks (read from `scratch`, a scratch repository over `repo` with the session's own
    objects); how many. Nothing else of the real `.git` changes."""
    from gitsess.git.objects import promote as copy_in

    return copy_in(scratch, repo, git.commits)


def reverted_in_view(
    scratch: Repository,
    view: SessionView,
    git: SessionGit,
    changed: set[str],
    pathspecs: Pathspec,
) -> dict[str, tuple[str, int] | None]:
    """Paths the session's commits changed where the view now shows what the worktree has
    (no change of the delta's): their view state, for the commit on top of the replayed ones."""
    from gitsess.git.trees import changed_along

    return {
        path: _view_state(scratch, view, path)
        for path in changed_along(scratch, git.chain[0], git.chain[-1])
        if path not in changed and pathspecs.matches(path)
    }


def _view_state(scratch: Repository, view: SessionView, path: str) -> tuple[str, int] | None:
    from gitsess.git.changes import Side
    from gitsess.git.diff import read_view
    from gitsess.git.trees import store_blob

    entry = view.entry(path)
    if entry is None or entry.kind not in ("file", "symlink"):
        return None
    state = Side(entry.kind, entry.mode, entry.size, entry.mtime_ns, None)
    mode = state.git_mode
    assert mode is not None
    return store_blob(scratch, read_view(view, path, state)), mode
