"""Archive refs: a removed session's work kept as a commit under `refs/gitsess/archive/<name>`.

The commit's tree is the session's base tree with the session's git-visible changes (tracked
and untracked-not-ignored paths) applied, built like `apply --commit` builds its trees; its
parent is the session's base (none on an unborn branch), so `git log`, `git diff` and `git show`
work on it. What restoring needs besides the tree (name, id, title, binding) is written as
trailers at the end of the message, where git tools show it and `git interpret-trailers` parses
it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import pygit2
from pygit2.enums import DeltaStatus, ObjectType

from gitsess.errors import GitsessError
from gitsess.git import dotgit
from gitsess.git.changes import GIT_EXEC, GIT_FILE, GIT_LINK, ChangeSet
from gitsess.git.objects import commit_tree, copy_objects, edit_tree, signature, store_view_blob
from gitsess.git.scratch import scratch_repo
from gitsess.git.view import SessionView

PREFIX = "refs/gitsess/archive/"
_TRAILER = "Gitsess-"
# Field name in the message -> attribute of ArchiveInfo (and of the session it came from).
_FIELDS = {
    "Session": "session_id",
    "Name": "name",
    "Title": "title",
    "Worktree": "worktree",
    "Branch": "branch",
    "Created": "created_at",
    "Head": "head",
    "Kv": "kv",
}
# The file of a key-value store's commit (see `create_archive`).
KV_FILE = "kv.json"


@dataclass(frozen=True)
class ArchiveInfo:
    ref: str  # full ref name
    commit: str
    base: str | None  # the session's base commit (the archive's parent)
    archived_at: datetime
    session_id: str
    name: str  # the session's name (the ref's last part may carry a suffix)
    title: str
    worktree: str
    branch: str | None
    created_at: str
    head: str | None = None  # the last commit made inside the session, which it keeps
    kv: str | None = None  # the commit holding the session's key-value store

    @property
    def ref_name(self) -> str:
        """What `restore` takes: the ref without its prefix."""
        return self.ref.removeprefix(PREFIX)


@dataclass(frozen=True)
class ArchivedPath:
    """One path the archive changed against its base: its (blob id, git mode), None if gone."""

    path: str
    entry: tuple[str, int] | None


def create_archive(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    base: str | None,
    name: str,
    fields: Mapping[str, str | None],
    head: str | None = None,
    kv: bytes | None = None,
) -> str:
    """Commit base + the git-visible `changes` and point a new archive ref at it.

    `fields` are the session's metadata (keys of `ArchiveInfo`). `head` is the last of the
    commits made inside the session (their objects in `repo` already): a parent, so that the
    archive keeps them reachable (their changes are in its tree too). `kv` is the session's
    key-value store (JSON), kept as the one file of a commit of its own, a parent too. Both
    are named by trailers. The ref is `<prefix><name>`, or `<name>-2`, `-3`, ... when an
    earlier archive of that name is still there. Returns the full ref name.
    """
    with scratch_repo(repo) as scratch:
        tree = snapshot_tree(scratch, view, changes, base)
        copy_objects(scratch, repo, tree)
    author = _signature(repo, "AUTHOR")
    committer = _signature(repo, "COMMITTER")
    fields = {**fields, "head": head}
    if kv is not None:
        store = repo.TreeBuilder()
        store.insert(KV_FILE, repo.create_blob(kv), pygit2.enums.FileMode.BLOB)
        fields["kv"] = str(
            repo.create_commit(
                None, author, committer, f"gitsess key-value store of session {name}\n",
                store.write(), [],
            )
        )  # fmt: skip
    more = [fields["head"], fields.get("kv")]
    parents = [pygit2.Oid(hex=c) for c in [base, *more] if c]
    oid = repo.create_commit(
        None, author, committer, _message(name, fields), pygit2.Oid(hex=tree), parents
    )
    for n in range(1, 10_000):
        ref = PREFIX + (name if n == 1 else f"{name}-{n}")
        try:
            repo.create_reference_direct(ref, oid, False, message="gitsess rm: archive")
        except pygit2.AlreadyExistsError:
            continue
        return ref
    raise GitsessError(f"too many archives named {name}; delete some under {PREFIX}")


def snapshot_tree(
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    base: str | None,
    undo: Mapping[str, tuple[str, int] | None] | None = None,
) -> str:
    """In `scratch` (see `scratch_repo`): the tree of `base` with the git-visible `changes`
    applied, i.e. the session's work as git holds it (`undo`: entries set first, which the
    changes override). `copy_objects` keeps it."""
    entries = {c.path: store_view_blob(scratch, view, c) for c in changes.git_changes()}
    return edit_tree(scratch, commit_tree(scratch, base), {**(undo or {}), **entries})


def _signature(repo: pygit2.Repository, role: Literal["AUTHOR", "COMMITTER"]) -> pygit2.Signature:
    # An archive is gitsess's own bookkeeping: a missing identity must not stop `rm`.
    try:
        return signature(repo, role)
    except GitsessError:
        return pygit2.Signature("gitsess", "gitsess@localhost")


def _message(name: str, fields: Mapping[str, str | None]) -> str:
    title = fields.get("title") or ""
    lines = [f"gitsess archive of session {name}" + (f": {title}" if title else ""), ""]
    for label, attr in _FIELDS.items():
        value = fields.get(attr)
        if value:
            # a trailer is one line: a title with newlines would end the block early
            lines.append(f"{_TRAILER}{label}: {' '.join(value.splitlines())}")
    return "\n".join(lines) + "\n"


def list_archives(repo: pygit2.Repository) -> list[ArchiveInfo]:
    """Every archive of the repository, newest first; refs that are not archives are skipped."""
    found = []
    for ref in repo.references.iterator():
        if ref.name.startswith(PREFIX):
            info = _info(repo, ref.name)
            if info is not None:
                found.append(info)
    return sorted(found, key=lambda a: (a.archived_at, a.ref), reverse=True)


def read_archive(repo: pygit2.Repository, name: str) -> ArchiveInfo:
    """The archive `name` (the part after the prefix, or the full ref)."""
    ref = name if name.startswith(PREFIX) else PREFIX + name
    info = _info(repo, ref) if pygit2.reference_is_valid_name(ref) else None
    if info is None:
        raise GitsessError(f"no archive {name!r} (see `gitsess archives`)")
    return info


def _info(repo: pygit2.Repository, ref: str) -> ArchiveInfo | None:
    try:
        commit = repo.references[ref].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None
    values: dict[str, str] = {}
    for line in commit.message.splitlines():
        label, sep, value = line.partition(": ")
        if sep and label.startswith(_TRAILER) and label[len(_TRAILER) :] in _FIELDS:
            values[_FIELDS[label[len(_TRAILER) :]]] = value
    if "session_id" not in values or "name" not in values:
        return None
    when = datetime.fromtimestamp(commit.committer.time, UTC)
    kept = {values.get("head"), values.get("kv")}  # the parents that are not the base
    return ArchiveInfo(
        ref=ref,
        commit=str(commit.id),
        base=next((str(c) for c in commit.parent_ids if str(c) not in kept), None),
        archived_at=when,
        session_id=values["session_id"],
        name=values["name"],
        title=values.get("title", ""),
        worktree=values.get("worktree", ""),
        branch=values.get("branch"),
        created_at=values.get("created_at", ""),
        head=values.get("head"),
        kv=values.get("kv"),
    )


def archived_paths(repo: pygit2.Repository, info: ArchiveInfo) -> list[ArchivedPath]:
    """What the archive changed against its base, path by path (no rename detection: a rename
    is a removal and an addition, which is what restoring writes)."""
    return changed_paths(repo, info.base, info.commit)


def changed_paths(repo: pygit2.Repository, base: str | None, commit: str) -> list[ArchivedPath]:
    """What `commit` changed against `base` (None: the empty tree), as `archived_paths`."""
    base_tree = repo.get(commit_tree(repo, base))
    tree = repo.get(commit_tree(repo, commit))
    assert isinstance(base_tree, pygit2.Tree) and isinstance(tree, pygit2.Tree)
    out: dict[str, tuple[str, int] | None] = {}
    for delta in base_tree.diff_to_tree(tree).deltas:
        if delta.status == DeltaStatus.DELETED:
            out.setdefault(delta.old_file.path, None)
            continue
        new = delta.new_file
        if delta.status == DeltaStatus.TYPECHANGE or new.path != delta.old_file.path:
            out.setdefault(delta.old_file.path, None)
        out[new.path] = (str(new.id), int(new.mode))
    return [ArchivedPath(p, e) for p, e in sorted(out.items())]


def refused_paths(paths: Sequence[ArchivedPath]) -> list[str]:
    """The paths of `paths` that no session holds, so that a commit carrying them was made
    by hand (a crafted remote): a `.git` in any spelling (`dotgit.refused`: laid out, it is a
    repository whose config the next `git status` there runs), or an entry that is neither a
    file nor a symlink (a gitlink names another repository's commit, which is not here)."""
    return [
        p.path
        for p in paths
        if dotgit.refused(p.path, symlink=p.entry is not None and p.entry[1] == GIT_LINK)
        or (p.entry is not None and p.entry[1] not in (GIT_FILE, GIT_EXEC, GIT_LINK))
    ]


def refused_in_tree(repo: pygit2.Repository, tree: str) -> list[str]:
    """`refused_paths` of every entry of `tree` (read as an index: in C, and an index is
    where such a tree's paths would land)."""
    index = pygit2.Index()
    index.read_tree(repo[tree].peel(pygit2.Tree))
    return refused_paths([ArchivedPath(e.path, (str(e.id), e.mode)) for e in index])


def archived_kv(repo: pygit2.Repository, info: ArchiveInfo) -> bytes | None:
    """The key-value store an archive keeps (JSON), None if it keeps none."""
    if info.kv is None:
        return None
    try:
        tree = repo[info.kv].peel(pygit2.Tree)
        return blob_data(repo, str(tree[KV_FILE].id))
    except (KeyError, ValueError, pygit2.GitError) as e:
        raise GitsessError(f"the key-value store of archive {info.ref_name} is damaged") from e


def blob_data(repo: pygit2.Repository, oid: str) -> bytes:
    blob = repo.get(oid)
    if blob is None or blob.type != ObjectType.BLOB:
        raise GitsessError(f"archive object {oid} is missing from the repository")
    assert isinstance(blob, pygit2.Blob)
    return blob.data


def delete_archive(repo: pygit2.Repository, info: ArchiveInfo) -> None:
    """Remove the ref, but only while it still points at the archive that was read."""
    try:
        ref = repo.references[info.ref]
    except KeyError:
        return
    if str(ref.target) == info.commit:
        ref.delete()
