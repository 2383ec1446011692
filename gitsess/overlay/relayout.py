"""A linked worktree's delta from before its view had git's own layout, moved to it.

The view of a linked worktree used to show `.git` as a directory, the admin dir, with the common
dir below it as `.git/common`; it now shows git's layout (`gitdir.py`): `.git` a file, `.GIT`
the common dir, the admin dir at `.GIT/worktrees/<id>`. A delta that still holds a `.git`
directory (what the session wrote there: its commits, refs, index) is moved when it is loaded,
the same nodes under their new names with their new origins: `.git/common` becomes `.GIT`,
`.git` becomes `.GIT/worktrees/<id>`, and the session's old `commondir` goes (the view's is the
session's file again). Readers beside a daemon move it in memory; the next commit of a writer
records it, and a rewind to a checkpoint from before loads it and moves it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gitsess.overlay.gitdir import GIT, GIT_COMMON
from gitsess.overlay.nodes import ROOT_INODE, Node

if TYPE_CHECKING:
    from gitsess.overlay.node_table import NodeTable

_OLD_COMMON = b"common"
_OLD_COMMONDIR = b"commondir"


def relayout(table: NodeTable) -> None:
    """Move an old layout's `.git` directory (see the module docstring); nothing otherwise."""
    root = table.nodes[ROOT_INODE]
    admin = table.nodes.get((root.entries or {}).get(GIT, 0))
    if not table.lower.redirects or admin is None or admin.entries is None:
        return
    if admin.origin != GIT:
        return  # a directory the session made there itself, not the admin dir
    common_ino = admin.entries.get(_OLD_COMMON)
    for name in (_OLD_COMMON, _OLD_COMMONDIR):
        if admin.entries.pop(name, None) is not None:
            table.pending.dentries[(admin.ino, name)] = None
    del (root.entries or {})[GIT]
    table.pending.dentries[(ROOT_INODE, GIT)] = None  # the worktree's `.git` file shows again
    if common_ino == 0:
        table.set_entry(root, GIT_COMMON, 0)  # the session removed its common dir
        return
    common = _common(table, root, common_ino)
    worktrees = table.find_in(common, b"worktrees") if common is not None else None
    if common is None or worktrees is None or not worktrees.is_dir:
        return  # (no place for the admin dir: the session's own HEAD and index go)
    table.make_upper(worktrees)
    dir_path = table.lower.git.dir
    table.set_entry(worktrees, dir_path.rpartition(b"/")[2], admin.ino)
    admin.parent, admin.name = worktrees.ino, dir_path.rpartition(b"/")[2]
    _rename(table, admin, GIT, dir_path)


def _common(table: NodeTable, root: Node, ino: int | None) -> Node | None:
    """The view's `.GIT`: the old common dir's node moved there, or the worktree's own made
    the session's when the old one was never copied up."""
    if ino is None:
        common = table.find_in(root, GIT_COMMON)
        if common is not None:
            table.make_upper(common)
        return common
    common = table.nodes[ino]
    table.set_entry(root, GIT_COMMON, ino)
    common.parent, common.name = ROOT_INODE, GIT_COMMON
    _rename(table, common, GIT + b"/" + _OLD_COMMON, GIT_COMMON)
    return common


def _rename(table: NodeTable, top: Node, old: bytes, new: bytes) -> None:
    """Give every node from `top` down whose origin lies below `old` that origin below `new`."""
    todo = [top]
    while todo:
        n = todo.pop()
        origin = n.origin
        if origin is not None and (origin == old or origin.startswith(old + b"/")):
            n.origin = new + origin[len(old) :]
            table.pending.nodes.add(n.ino)
        todo.extend(table.nodes[i] for i in (n.entries or {}).values() if i in table.nodes)
