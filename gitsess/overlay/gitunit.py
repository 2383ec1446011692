"""HEAD, the index and the current branch's ref of the view's `.git`: one unit.

Each file below `.git` follows the real one until the session changes it. For these three that
is not enough: a session whose index is its own while its HEAD still follows the real branch
commits the session's index on top of a real commit it never saw, and so reverts that commit.
So they follow the real repository together, or are the session's own together: the first
change the session makes to any of them (or to their lock files, or to `packed-refs`, which
may hold the branch) first makes all three its own, with the reflogs of HEAD and the branch,
as the real repository has them at one instant (`_real_state`: read twice alike, with none of
git's lock files on them held, as git itself leaves them between two commands). A HEAD
renamed in while they are the session's own (`git checkout other`) takes the branch it names
along (`_own_branch`).

Whether they are the session's own is the view's HEAD (in its git dir, `gitdir.GitLayout`)
being an upper file (or gone); an
apply that hands them back to the real repository drops all three together
(`services/session_git.py`). Once they are its own, a real branch that moves later is not the
session's HEAD: `show` counts it "behind" by the new commits, and `apply --commit` replays onto
them. A real git's lock file on them is never in the view (`hides_real_lock`, asked by
`NodeTable.find`): a git inside would take it for its own and fail ("File exists"). The race left: a
git command inside that read the real state just before an outside commit, and writes after it,
writes what it read.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gitsess.errors import GitsessError
from gitsess.overlay.gitdir import in_git
from gitsess.overlay.nodes import Node, join

if TYPE_CHECKING:
    from gitsess.git.head import SessionHead
    from gitsess.overlay.tree import Tree

_LOCK = b".lock"
# How long a snapshot waits for git's lock files on the unit to go (a real `git commit` moves
# the ref, then renames its index in): past it, the state is taken as it is.
_SETTLE_S = 2.0
_SETTLE_STEP_S = 0.005

# HEAD, index, branch, its tip, and the reflogs of HEAD and of the branch
GitState = tuple[bytes, bytes | None, str | None, str | None, bytes | None, bytes | None]


# ---------------------------------------------------------------- the hooks (called by Tree)


def before_node_change(tree: Tree, n: Node) -> None:
    """Called before lower node `n` gets a row of its own."""
    busy = n.upper or tree.git_unit_busy or not stat.S_ISREG(n.mode)
    if not busy and _in_unit(tree, n.lower):
        own(tree)


def before_name_change(tree: Tree, parent: Node, name: bytes) -> None:
    """Called before a name in `parent` is made, removed or renamed."""
    rel = parent.worktree_rel
    if rel is not None and not tree.git_unit_busy and _in_unit(tree, join(rel, name)):
        own(tree)


def after_rename(tree: Tree, parent: Node, name: bytes) -> None:
    """A file renamed in as `name` of `parent`: when that is HEAD, the branch it names becomes
    the session's own too (as the real repository has it, if it was not yet)."""
    if parent.worktree_rel is None or join(parent.worktree_rel, name) != tree.lower.git.head_file:
        return
    head = _view_head(tree)
    if head.branch is None:
        return
    branch = head.branch
    n = tree.resolve(_common(tree) + branch.encode())
    if n is not None and n.upper:
        return
    # At the tip git inside just read: the real ref's, or the session's own `packed-refs`'
    # once a `git gc` inside packed its refs (the real loose ref hidden), never the real tip
    # the session did not see.
    _busy(tree, lambda: _put_ref(tree, branch, head.commit))


def hides_real_lock(tree: Tree, n: Node) -> bool:
    """Whether lower node `n` is a real git's lock file on HEAD, the index or the session's
    branch: not the session's, so not in its view (a git inside would take it for another git
    at work on its own state). Also while the unit follows the real repository (after an
    apply handed it back): a git inside that takes a lock makes the unit its own first, as
    the real repository has it once the real git is done (`_real_state`), and works on that."""
    rel = n.lower
    if rel is None or not rel.endswith(_LOCK) or n.upper:
        return False
    bare = rel.removesuffix(_LOCK)
    if bare in (tree.lower.git.head_file, tree.lower.git.index_file):
        return True
    branch = _view_head(tree).branch
    return branch is not None and bare == _common(tree) + branch.encode()


# ---------------------------------------------------------------- taking the unit


def is_own(tree: Tree) -> bool:
    head = tree.resolve(tree.lower.git.head_file)
    return head is None or head.upper


def own(tree: Tree) -> None:
    """Make HEAD, the index and the current branch's ref the session's own, as the real
    repository has them at one instant (nothing when they are already)."""
    if is_own(tree):
        return
    head, index, branch, tip, head_log, branch_log = _real_state(tree)
    if index is not None and tree.index_view is not None:
        # as the view showed it: git checks that the index it read is the one it replaces
        index = tree.index_view.as_shown(index)

    def put() -> None:
        _put(tree, tree.lower.git.head_file, head)
        if index is not None:
            _put(tree, tree.lower.git.index_file, index)
        if branch is not None:
            _put_ref(tree, branch, tip)
        # Their reflogs too, as they were then: a commit made outside later is no more in
        # them than in the session's history (`git prune` inside keeps what they name).
        if head_log is not None:
            _put(tree, tree.lower.git.dir + b"/logs/HEAD", head_log)
        if branch is not None and branch_log is not None:
            _put(tree, _common(tree) + b"logs/" + branch.encode(), branch_log)

    _busy(tree, put)


def _busy(tree: Tree, work: Callable[[], None]) -> None:
    tree.git_unit_busy = True
    try:
        work()
    finally:
        tree.git_unit_busy = False


def _common(tree: Tree) -> bytes:
    """Where the view keeps refs and packed-refs: `.GIT/` for a linked worktree."""
    return tree.lower.git.common + b"/"


def _in_unit(tree: Tree, rel: bytes | None) -> bool:
    """Whether a change at view path `rel` changes the unit (a lock file of one of its files
    included, and a directory holding one renamed or removed)."""
    if not in_git(rel):
        return False
    assert rel is not None
    bare = rel.removesuffix(_LOCK)
    common = _common(tree)
    head, index = tree.lower.git.head_file, tree.lower.git.index_file
    if bare in (head, index, common + b"packed-refs"):
        return True
    heads = common + b"refs/heads"
    if any(held.startswith(rel + b"/") for held in (heads + b"/", head)):
        return True  # `.git`, `.git/refs`, `.git/refs/heads` themselves (or the admin dir)
    if not bare.startswith(heads + b"/"):
        return False
    branch = _view_head(tree).branch
    if branch is None:
        return False
    ref = common + branch.encode()
    return bare == ref or (ref + b"/").startswith(bare + b"/")


def _view_head(tree: Tree) -> SessionHead:
    # (loaded here: it loads pygit2, which `ls` of a session that never wrote `.git` must not)
    from gitsess.git.head import SessionHead, read_head

    common = _common(tree)

    def read(rel: str) -> bytes | None:
        path = tree.lower.git.head_file if rel == "HEAD" else common + rel.encode()
        n = tree.resolve(path)
        if n is None or not stat.S_ISREG(n.mode):
            return None
        if not n.upper:
            return _real(tree, path)
        return tree.read(n, 0, n.size)

    try:
        return read_head(read)
    except GitsessError:
        return SessionHead(None, None)


def _real(tree: Tree, rel: bytes) -> bytes | None:
    try:
        with open(tree.lower_path(rel), "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _real_state(tree: Tree) -> GitState:
    """The real HEAD's bytes, the real index's, HEAD's branch and that branch's tip, as one
    state of the real repository: read twice alike, with no lock file of git's on them."""
    deadline = time.monotonic() + _SETTLE_S
    last: GitState | None = None
    while True:
        state = _read_real_state(tree)
        if state == last and not _real_locks(tree, state[2]):
            return state
        if time.monotonic() > deadline:
            return state
        if last is not None:
            # (the second read follows the first at once: a git at work holds a lock file
            # from before its first change to after its last, so a wait between two reads
            # catches nothing more; it was 5 ms of every first `git status`)
            time.sleep(_SETTLE_STEP_S)
        last = state


def _read_real_state(tree: Tree) -> GitState:
    from gitsess.git.head import read_head

    head = _real(tree, tree.lower.git.head_file) or b""
    common = _common(tree)

    def read(rel: str) -> bytes | None:
        return head if rel == "HEAD" else _real(tree, common + rel.encode())

    index = _real(tree, tree.lower.git.index_file)
    head_log = _real(tree, tree.lower.git.dir + b"/logs/HEAD")
    try:
        parsed = read_head(read)
    except GitsessError:
        return head, index, None, None, head_log, None
    branch = parsed.branch
    branch_log = None if branch is None else _real(tree, common + b"logs/" + branch.encode())
    return head, index, branch, parsed.commit, head_log, branch_log


def _real_locks(tree: Tree, branch: str | None) -> bool:
    names = [tree.lower.git.head_file, tree.lower.git.index_file] + (
        [_common(tree) + branch.encode()] if branch else []
    )
    return any(os.path.lexists(tree.lower_path(rel + _LOCK)) for rel in names)


def _put(tree: Tree, rel: bytes, data: bytes) -> None:
    n = tree.resolve(rel)
    if n is not None and stat.S_ISREG(n.mode):
        _rewrite(tree, n, data)


def _rewrite(tree: Tree, n: Node, data: bytes) -> None:
    tree.ensure_data(n, keep=0)
    tree.write(n, 0, data)


def _put_ref(tree: Tree, branch: str, tip: str | None) -> None:
    """The branch's loose ref in the session at `tip`; for None (no such branch yet), a
    loose ref the real repository has is hidden."""
    parts = (_common(tree) + branch.encode()).split(b"/")
    d = tree.resolve(b"")
    assert d is not None
    for part in parts[:-1]:
        child = tree.find(d.ino, part)
        if child is None:
            if tip is None:
                return
            child = tree.add_dir(d, part)
        if not child.is_dir:
            return
        d = child
    name = parts[-1]
    n = tree.find(d.ino, name)
    if n is not None and not stat.S_ISREG(n.mode):
        return
    if tip is None:
        if n is not None:
            tree.hide(d, name)
    elif n is not None:
        _rewrite(tree, n, tip.encode() + b"\n")
    else:
        tree.add_file(d, name, tip.encode() + b"\n")
