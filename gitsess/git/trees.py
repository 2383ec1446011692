"""Questions about commits and trees, answered in plain values (hex ids, paths, counts) for the
layers above, which hold a repository only as a handle (git/repo.py)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from gitsess.git.repo import Person

# A path's state in a tree: (blob id, git mode), None when the tree does not have it.
Entry = tuple[str, int] | None


def valid_branch_name(name: str) -> bool:
    """Whether `name` (short or full) names a branch git would make."""
    return pygit2.reference_is_valid_name(f"refs/heads/{name.removeprefix('refs/heads/')}")


def commit_tree_id(repo: pygit2.Repository, rev: str) -> str:
    """The id of the tree of the commit `rev` names."""
    return str(repo[rev].peel(pygit2.Commit).tree_id)


def subject(repo: pygit2.Repository, commit: str) -> str:
    """The first line of a commit's message ("" when it cannot be read)."""
    try:
        return str(getattr(repo[commit], "message", "")).partition("\n")[0]
    except (KeyError, ValueError):
        return ""


def paths_changed(repo: pygit2.Repository, commit: str) -> int:
    """How many paths a commit changed against its first parent (all of them for a root)."""
    new = repo[commit].peel(pygit2.Commit)
    old = new.parents[0].tree if new.parents else None
    diff = old.diff_to_tree(new.tree) if old is not None else new.tree.diff_to_tree(swap=True)
    return len(diff)


def changed_between(repo: pygit2.Repository, old: str, new: str) -> set[str]:
    """Paths (old and new names) that differ between the trees of commits `old` and `new`."""
    deltas = repo[old].peel(pygit2.Tree).diff_to_tree(repo[new].peel(pygit2.Tree)).deltas
    return {path for d in deltas for path in (d.old_file.path, d.new_file.path)}


def changed_along(repo: pygit2.Repository, first: str, last: str) -> list[str]:
    """Paths a line of commits from `first` to `last` changed: `last`'s tree against that of
    `first`'s first parent (against nothing for a root)."""
    start = repo[first].peel(pygit2.Commit)
    end = repo[last].peel(pygit2.Commit)
    old = start.parents[0].tree if start.parents else None
    diff = old.diff_to_tree(end.tree) if old is not None else end.tree.diff_to_tree()
    return list(dict.fromkeys(p for d in diff.deltas for p in (d.old_file.path, d.new_file.path)))


def entries_at(
    repo: pygit2.Repository, commit: str | None, paths: Sequence[str]
) -> dict[str, Entry]:
    """Each path's entry in the tree of `commit` (all None for None)."""
    # (here: the objects module loads the apply machinery, which `show`'s `subject` must not)
    from gitsess.git.objects import tree_entry

    tree = None if commit is None else repo[commit].peel(pygit2.Tree)
    return {p: tree_entry(tree, p) if tree is not None else None for p in paths}


def merge_base(repo: pygit2.Repository, a: str | None, b: str | None) -> str | None:
    if a == b or a is None or b is None:
        return a if a == b else None
    base = repo.merge_base(a, b)
    return str(base) if base is not None else None


def conflicting_paths(
    scratch: pygit2.Repository,
    paths: Sequence[str],
    base: Mapping[str, Entry],
    ours: Mapping[str, Entry],
    theirs: Mapping[str, Entry],
) -> tuple[str, ...]:
    """Which of `paths` a three-way merge cannot merge. Only those paths are merged, each side
    a tree of them alone: a path's merge depends on its three versions, and trees of the whole
    worktree cost a tree write per directory of it."""
    contested = [p for p in paths if ours[p] != theirs[p] and base[p] not in (ours[p], theirs[p])]
    if not contested:
        return ()
    ancestor, one, other = (
        _small_tree(scratch, {p: side[p] for p in contested}) for side in (base, ours, theirs)
    )
    index = scratch.merge_trees(ancestor, one, other)
    if index.conflicts is None:
        return ()
    return tuple(
        sorted({next(str(e.path) for e in entry if e is not None) for entry in index.conflicts})
    )


def _small_tree(scratch: pygit2.Repository, entries: Mapping[str, Entry]) -> pygit2.Oid:
    index = pygit2.Index()
    for path, entry in entries.items():
        if entry is not None:
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=entry[0]), FileMode(entry[1])))
    return index.write_tree(scratch)


def index_of(repo: pygit2.Repository, commit: str) -> bytes:
    """An index file of `commit`'s tree, with no stat data (git checks each file's content
    once, then records it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "index")
        index = pygit2.Index(path)
        index.read_tree(repo[commit].peel(pygit2.Commit).tree)
        index.write()
        with open(path, "rb") as f:
            return f.read()


def store_blob(repo: pygit2.Repository, data: bytes) -> str:
    """Write `data` as a blob; its id."""
    return str(repo.create_blob(data))


def object_size(repo: pygit2.Repository, oid: str) -> int:
    """The size of an object's content, from its header (the content is not read)."""
    return int(repo.odb.read_header(oid)[1])


def point_ref(repo: pygit2.Repository, ref: str, commit: str) -> None:
    """Make (or move) `ref` to `commit`, with no compare: a ref of gitsess's own."""
    repo.references.create(ref, pygit2.Oid(hex=commit), force=True)


def init_with_commit(path: Path, who: Person, files: Mapping[str, str], message: str) -> None:
    """A new repository at `path` on `main`, with `who` as its identity, holding `files`
    (relative paths) in one commit."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    repo.config["user.name"] = who.name
    repo.config["user.email"] = who.email
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    author = repo.default_signature
    repo.create_commit("HEAD", author, author, message, repo.index.write_tree(), [])
