"""What a throwaway view of a commit needs from git: the paths where the commit's files differ
from what the real worktree holds now (the view's lower layer), and the index that goes with
the commit in the view. A gated apply's test runs in such a view (`services/result_view.py`):
only those paths are written, however big the repository."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from gitsess.git.archive_commits import ArchivedPath, changed_paths

GIT_SUBMODULE = 0o160000
GIT_TREE = 0o040000


def differing(repo: pygit2.Repository, commit: str) -> list[ArchivedPath]:
    """The paths where `commit` differs from the worktree of `repo` as it is now: what its
    HEAD changed against the commit, and whatever `git status` lists there (uncommitted and
    untracked files; ignored ones stay, as in a checkout next to a build), each with the
    commit's entry or None. A submodule is left as the worktree has it."""
    head = None if repo.head_is_unborn else str(repo.head.peel(pygit2.Commit).id)
    found = {item.path: item for item in changed_paths(repo, head, commit)}
    tree = repo[commit].peel(pygit2.Tree)
    for path in repo.status(untracked_files="all", ignored=False):
        if path in found:
            continue
        try:
            entry = tree[path]
        except KeyError:
            found[path] = ArchivedPath(path, None)
            continue
        if entry.filemode != GIT_TREE:
            found[path] = ArchivedPath(path, (str(entry.id), int(entry.filemode)))
    return [
        item
        for path, item in sorted(found.items())
        if item.entry is None or item.entry[1] != GIT_SUBMODULE
    ]


def index_for(repo: pygit2.Repository, commit: str, paths: Sequence[ArchivedPath]) -> bytes:
    """An index of `commit` for a view whose files are the worktree's but at `paths`: the
    worktree's own index with those paths set to the commit's entries. The entries it keeps
    carry their stat data, so a `git status` in the view checks only the files that changed.
    An index in conflict is started again from the commit's tree: every file is checked once."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "index")
        with suppress(FileNotFoundError):  # (an unborn branch: no index yet)
            shutil.copyfile(Path(repo.path) / "index", path)
        index = pygit2.Index(path)
        if index.conflicts is not None:
            index.read_tree(repo[commit].peel(pygit2.Tree))
        else:
            for item in paths:
                if item.path in index:
                    index.remove(item.path)
                if item.entry is not None:
                    oid, mode = item.entry
                    index.add(pygit2.IndexEntry(item.path, pygit2.Oid(hex=oid), FileMode(mode)))
        index.write()
        with open(path, "rb") as f:
            return f.read()
