"""Git objects for an apply: blobs from the view, trees edited by path, signatures, and copying
from the scratch object database into the repository.

Promotion copies into the real store exactly the objects the promoted commits need and the
real store lacks (a tree it holds is taken whole), before any ref names them, as git's
quarantine does: 100 objects or more as one pack (`packwrite`), fewer as loose objects through
an odb of the loose store alone (through the full odb every write first looks the object up and
each miss rescans the pack directory). A session-owned blob an apply's tree needs is copied too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path
from typing import Literal

import pygit2
from pygit2.enums import FileMode, ObjectType

from gitsess import progress
from gitsess.errors import GitsessError
from gitsess.git import packwrite
from gitsess.git.blobid import blob_id
from gitsess.git.changes import Change
from gitsess.git.cleaning import Cleaner
from gitsess.git.diff import read_view
from gitsess.git.repo import Person, common_dir
from gitsess.git.scratch import BIG_FILE, ScratchRepository
from gitsess.git.session_objects import needed_objects
from gitsess.git.view import SessionView


def view_or_blob(repo: pygit2.Repository, view: SessionView, path: str, oid: pygit2.Oid) -> bytes:
    """A blob the scratch repository holds (made there, or kept as the session's file was
    hashed) comes from memory. Other blobs the real repository already had: reading them
    back from the object store (inflating a loose object) costs more than reading the
    session's file again and hashing it. A file changed since, or a merge of it, has another
    hash and is read from the object store."""
    kept = _kept(repo, oid)
    if kept is not None:
        return kept
    with suppress(OSError):
        data = view.read(path)
        if blob_id(data) == oid:
            return data
    return _stored_blob(repo, oid)


def worktree_bytes(
    repo: pygit2.Repository, view: SessionView, path: str, oid: pygit2.Oid, cleaner: Cleaner
) -> bytes:
    """What the worktree gets for blob `oid` committed from the session's file at `path`: the
    session's bytes, also where the clean filters made the blob of them (CRLF lines where the
    blob has LF, as `git add` leaves the file); else the blob (a merge of it)."""
    own = cleaner.own_blob(path, str(oid))
    return view_or_blob(repo, view, path, oid if own is None else pygit2.Oid(hex=own))


def blob_data(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    kept = _kept(repo, oid)
    return kept if kept is not None else _stored_blob(repo, oid)


def _kept(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes | None:
    return repo.blob_data(oid) if isinstance(repo, ScratchRepository) else None


def _stored_blob(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    blob = repo.get(oid)
    assert isinstance(blob, pygit2.Blob)
    return blob.data


def store_view_blob(
    scratch: pygit2.Repository, view: SessionView, change: Change, cleaner: Cleaner | None = None
) -> tuple[str, int] | None:
    """Store the view's side of a change in `scratch`; its (blob id, git mode), None if gone.
    With `cleaner`, a file's blob is what git would store for it (`cleaning.py`)."""
    entry = _store_view_blob(scratch, view, change)
    if entry is None or cleaner is None or change.new is None or change.new.kind != "file":
        return entry
    cleaner.refuse_driver(change.path)
    if change.new.size > BIG_FILE or not cleaner.filters(change.path):
        return entry  # (a big file is streamed, never held whole: stored as it is)
    data = view_or_blob(scratch, view, change.path, pygit2.Oid(hex=entry[0]))
    cleaned = cleaner.clean(change.path, data)
    if cleaned == data:
        return entry
    stored = str(scratch.create_blob(cleaned))
    cleaner.cleaned(change.path, stored, entry[0])
    return stored, entry[1]


def _store_view_blob(
    scratch: pygit2.Repository, view: SessionView, change: Change
) -> tuple[str, int] | None:
    entry = change.git_new
    if entry is None or change.new is None:
        return None
    if pygit2.Oid(hex=entry[0]) in scratch.odb:
        return entry  # kept when the change was computed (or already in the repository)
    if change.new.kind == "file" and change.new.size > BIG_FILE:
        assert isinstance(scratch, ScratchRepository)
        size = change.new.size
        with (
            view.open(change.path) as f,
            progress.reading(f, f"storing {change.path}", size) as read,
        ):
            oid = str(scratch.store_big(read))
    else:
        oid = str(scratch.create_blob(read_view(view, change.path, change.new)))
    if oid != entry[0]:
        raise GitsessError(
            f"{change.path} changed in the session while applying; nothing was changed, try again"
        )
    return entry


def commit_tree(repo: pygit2.Repository, commit: str | None) -> str:
    """The tree id of `commit`; the empty tree for None (an unborn branch)."""
    if commit is None:
        return str(repo.TreeBuilder().write())
    obj = repo.get(commit)
    try:
        assert obj is not None
        return str(obj.peel(pygit2.Tree).id)
    except (AssertionError, pygit2.GitError, ValueError) as e:
        raise GitsessError(f"{commit} is not a commit") from e


def edit_tree(
    repo: pygit2.Repository, tree: str, entries: dict[str, tuple[str, int] | None]
) -> str:
    """`tree` with each path set to (blob id, mode), or removed for None."""
    if not entries:
        return tree
    original = lookup_tree(repo, tree)
    index = pygit2.Index()
    index.read_tree(original)
    for path in sorted(entries, key=lambda p: entries[p] is not None):  # removals first
        entry = entries[path]
        if entry is None:
            if path in index:
                index.remove(path)
        else:
            # libgit2 drops what is in the way: a file where a directory was, or below a file
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=entry[0]), FileMode(entry[1])))
    return str(index.write_tree(repo))


def lookup_tree(repo: pygit2.Repository, oid: str) -> pygit2.Tree:
    tree = repo.get(oid)
    if not isinstance(tree, pygit2.Tree):
        raise GitsessError(f"{oid} is not a tree")
    return tree


def tree_entry(tree: pygit2.Tree, path: str) -> tuple[str, int] | None:
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.type != ObjectType.BLOB:
        return None
    return str(obj.id), int(obj.filemode)


def copy_objects(src: ScratchRepository, dest: pygit2.Repository, tree: str) -> None:
    """Copy the objects of `tree` that `dest` lacks (made in `src`, a scratch repository over
    `dest`, or a session's own there; one `dest` has holds a complete subtree); see
    `write_objects`."""
    made: list[packwrite.Entry] = []
    seen: set[pygit2.Oid] = set()
    pending = [pygit2.Oid(hex=tree)]
    while pending:
        oid = pending.pop()
        if oid in seen:
            continue
        seen.add(oid)
        found = src.created(oid)
        if found is None:
            if src.in_real(oid):
                continue
            # a session's own object (see `ScratchRepository`), which `dest` lacks too
            raw_kind, data = src.odb.read(oid)
            kind = int(raw_kind)
        else:
            kind, data = found
        if kind == ObjectType.TREE:
            subtree = src.get(oid)
            assert isinstance(subtree, pygit2.Tree)
            pending.extend(entry.id for entry in subtree if entry.type != ObjectType.COMMIT)
        made.append((oid, int(kind), data))
    write_objects(dest, made)


def promote(src: ScratchRepository, dest: pygit2.Repository, commits: Sequence[str]) -> int:
    """Copy into `dest` (the real repository under `src`) exactly the objects that the
    session's `commits` need and it lacks, as git's quarantine moves a push's objects in;
    returns how many."""
    try:
        made = needed_objects(src, commits, src.in_real)
    except (KeyError, pygit2.GitError) as e:
        # (a session's store a run damaged, or planted another object in: session_objects.py)
        raise GitsessError(
            f"an object the session's commits need is missing or damaged in its store ({e});"
            " nothing was copied"
        ) from None
    write_objects(dest, made)
    return len(made)


def write_objects(
    dest: pygit2.Repository, made: Sequence[packwrite.Entry], into: Path | None = None
) -> None:
    """Write objects into `dest`'s object store (or the object directory `into`, with `dest`'s
    settings): as one pack when there are many (`packwrite`), else as loose objects.

    Loose ones are written to `dest`'s loose store alone: through the repository's object
    database, every write first asks each backend whether it has the object, and each miss
    makes libgit2 rescan the pack directory (2,600 directory opens for 1,000 objects)."""
    if not made:
        return
    config = dest.config
    fsync = "core.fsyncObjectFiles" in config and config.get_bool("core.fsyncObjectFiles")
    objects = common_dir(dest) / "objects" if into is None else into
    objects.mkdir(exist_ok=True)
    if packwrite.fits(made):
        packwrite.write_pack(objects, made, fsync)
        return
    # As libgit2 writes them: zlib's fastest level, as git's default core.looseCompression.
    odb = pygit2.Odb()
    odb.add_backend(pygit2.OdbBackendLoose(str(objects), 1, fsync), 1)
    for _, kind, data in made:
        odb.write(kind, data)


def signature(repo: pygit2.Repository, role: Literal["AUTHOR", "COMMITTER"]) -> pygit2.Signature:
    """Who made a commit, as git decides it: `GIT_<ROLE>_NAME`/`_EMAIL`, else user.name and
    user.email from the repository's config; the time is now."""
    name = os.environ.get(f"GIT_{role}_NAME")
    email = os.environ.get(f"GIT_{role}_EMAIL")
    if name is None or email is None:
        try:
            default = repo.default_signature
        except (KeyError, pygit2.GitError) as e:
            raise GitsessError(
                f"no {role.lower()}: set user.name and user.email in git config"
            ) from e
        name = default.name if name is None else name
        email = default.email if email is None else email
    return pygit2.Signature(name, email)


def person(repo: pygit2.Repository, role: Literal["AUTHOR", "COMMITTER"]) -> Person:
    """Who git says makes a commit (`signature`), for the layers above."""
    found = signature(repo, role)
    return Person(found.name, found.email)


def as_signature(
    repo: pygit2.Repository,
    who: Person | pygit2.Signature | None,
    role: Literal["AUTHOR", "COMMITTER"],
) -> pygit2.Signature:
    """`who` signing now; None: who git says (`signature`)."""
    if who is None:
        return signature(repo, role)
    return pygit2.Signature(who.name, who.email) if isinstance(who, Person) else who
