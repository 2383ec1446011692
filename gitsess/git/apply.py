"""Applying a session's changes: into a commit, a patch, or the real worktree.

Each target takes the `ChangeSet` from `compute_changes` (already filtered by pathspecs and
ignore rules) and returns a result dataclass; none prints anything. Nothing is changed when any
conflict is found, and `dry_run` finds the same conflicts while changing nothing at all.

Commit: the session's tree is the base commit's tree with the changed paths set to the view's
state. When the branch tip moved away from the base, libgit2 merges three ways (ancestor: the
base). For a path whose real file equals the tip's version and was not changed in the real tree
since the session copied it, the session's edit was made on top of the tip's version, so that
version is the ancestor instead (no spurious conflict when the checked-out worktree followed the
tip). All objects are built in a scratch object database first and copied into the repository
only when the merge is clean; then the worktree files, the index, and last the branch ref move.
"""

from __future__ import annotations

import email.utils
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta, timezone
from email.header import Header
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast

import pygit2
from pygit2.enums import FileMode, ObjectType

from gitsess import progress
from gitsess.errors import GitsessError
from gitsess.git import packwrite
from gitsess.git.blobid import HashingReader, blob_id, file_blob_id
from gitsess.git.changes import (
    GIT_EXEC,
    GIT_LINK,
    Change,
    ChangeSet,
    State,
    StateKind,
)
from gitsess.git.diff import (
    BIG_FILE,
    CHUNK,
    BigFile,
    ScratchRepository,
    diff_changes,
    read_view,
    scratch_repo,
)
from gitsess.git.repo import common_dir
from gitsess.git.view import Entry, Kind, SessionView
from gitsess.git.worktree import checked_out_at


@dataclass(frozen=True)
class Conflict:
    """Why one path stops an apply.

    reasons: `worktree-changed` (the real file changed since the session copied it, or since
    the change set was computed), `worktree-exists` (the session created a path the real tree
    now has too), `parent-changed` (the directory holding a path the session deleted changed in
    the real tree), `not-empty` (a directory would have to go but holds paths this apply leaves
    alone), `merge` (the moved branch tip and the session changed the path incompatibly),
    `local-change` (the merge must rewrite a real file that has its own uncommitted change),
    `not-a-directory` (a path to create lies below a real file that this apply leaves alone),
    `checked-out-elsewhere` (the branch is checked out in another worktree).
    """

    path: str
    reason: str
    detail: str


@dataclass(frozen=True)
class WorktreeResult:
    applied: tuple[str, ...]  # paths written into the real tree (drop them from the delta)
    skipped: tuple[str, ...]  # selected paths left as they are (directories holding others)
    conflicts: tuple[Conflict, ...]
    dry_run: bool
    # real directories whose entries this apply changed (so their mtime moved): a copy-up record
    # (`copied_from`) of one of them that stays in the session must be refreshed to its lstat
    changed_dirs: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.conflicts


@dataclass(frozen=True)
class PatchResult:
    # `git apply` (or, with mbox, `git am`) input, from its start; empty when nothing changed.
    # A file: past `SPOOL_LIMIT` it is on disk, as a patch of a big file is as big.
    body: BinaryIO
    paths: tuple[str, ...]  # paths the patch touches (both sides of renames)
    skipped: tuple[str, ...]  # changes a patch cannot carry (permission bits, empty dirs)
    dry_run: bool = False  # making a patch changes nothing; this tells the caller not to write it

    @property
    def text(self) -> bytes:
        """The whole patch in memory: for small ones."""
        self.body.seek(0)
        return self.body.read()

    def write_to(self, out: BinaryIO) -> None:
        self.body.seek(0)
        shutil.copyfileobj(self.body, out)


# Past this size, a patch being made goes to a temporary file.
SPOOL_LIMIT = 8 << 20


def spooled(data: bytes = b"") -> BinaryIO:
    """A patch body: in memory up to `SPOOL_LIMIT`, then in a temporary file."""
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL_LIMIT)  # noqa: SIM115 (the result owns it)
    body.write(data)
    return cast(BinaryIO, body)


@dataclass(frozen=True)
class PathWrite:
    """One real-tree path a commit apply brings to the commit: its kind (None: removed) and
    permission bits. A file's or link's content is the commit tree's blob at that path."""

    path: str
    kind: StateKind | None
    perm: int
    rewrite: bool = True  # False: the content is already there, only the mode changes


@dataclass(frozen=True)
class CommitResult:
    branch: str  # full ref name
    parent: str | None  # the branch tip the commit was built on (None: unborn branch)
    base: str | None  # the session's base commit
    commit: str | None  # the new commit; None when nothing was committed
    tree: str | None
    merged: bool  # the tip had moved since the base: a three-way merge was made
    applied: tuple[str, ...]  # session paths now in the commit (drop them from the delta)
    skipped: tuple[str, ...]  # selected paths left out (see `worktree_updated`)
    conflicts: tuple[Conflict, ...]
    worktree_updated: bool  # the branch is checked out in the bound worktree: files + index
    updated: tuple[PathWrite, ...]  # real-tree writes (session paths and merge results)
    dry_run: bool
    changed_dirs: tuple[str, ...] = ()  # as in WorktreeResult
    new_branch: bool = False  # the branch did not exist: `parent` is where it starts
    # The branch tip the ref moves from, when the commit was built on another commit (the
    # session's own commits, replayed onto the tip): None means `parent`.
    moves_from: str | None = None

    @property
    def expected_tip(self) -> str | None:
        return self.parent if self.moves_from is None else self.moves_from

    @property
    def ok(self) -> bool:
        return not self.conflicts

    @property
    def updated_paths(self) -> tuple[str, ...]:
        return tuple(w.path for w in self.updated)

    def to_json(self) -> dict[str, Any]:
        """Plain data (for a journal, or `--json`); `from_json` reads it back.

        Built field by field: `asdict` deep-copies every value, some 6 ms for 1,000 paths."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["updated"] = [dict(vars(w)) for w in self.updated]
        data["conflicts"] = [dict(vars(c)) for c in self.conflicts]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CommitResult:
        values = dict(data)
        values["updated"] = tuple(PathWrite(**w) for w in data["updated"])
        values["conflicts"] = tuple(Conflict(**c) for c in data["conflicts"])
        for name in ("applied", "skipped", "changed_dirs"):
            values[name] = tuple(data[name])
        return cls(**values)


# ---------------------------------------------------------------------------------------------
# --worktree


@dataclass(frozen=True)
class Merged:
    """The session's changes merged onto the worktree's HEAD when it moved since the base."""

    entries: dict[str, tuple[str, int] | None]  # paths whose merged state is not the view's
    conflicts: tuple[Conflict, ...]
    head_tree: str | None = None  # the tree merged onto (None: no merge was needed)


def merge_onto_head(
    repo: pygit2.Repository,
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    base: str | None,
) -> Merged:
    """The session's git-visible changes merged three-way onto the commit the bound worktree
    has checked out, when that is not the session's base (a `git pull`, or another session's
    apply, since): without it a real file the branch changed meanwhile would be written, or
    diffed, back to the base's content. Merged blobs are in `scratch`."""
    head = _head_commit(repo)
    if head is None or base is None or head == base or not changes.git_changes():
        return Merged({}, ())
    build = _build_commit_tree(scratch, view, changes, head, base, {})
    if build.tree is None:
        return Merged({}, build.conflicts)
    tree = _tree(scratch, build.tree)
    entries = {}
    for change in changes.git_changes():
        entry = _tree_entry(tree, change.path)
        if entry != build.session_entries[change.path]:
            entries[change.path] = entry
    return Merged(entries, (), build.tip_tree)


def _head_commit(repo: pygit2.Repository) -> str | None:
    try:
        return None if repo.head_is_unborn else str(repo.head.peel(pygit2.Commit).id)
    except pygit2.GitError:
        return None


def apply_worktree(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    force: bool = False,
    dry_run: bool = False,
    merged: Merged | None = None,
    scratch: pygit2.Repository | None = None,
) -> WorktreeResult:
    """Write the changes into the real worktree of `repo` (creates, edits, deletes, modes,
    symlinks, type changes, directories).

    Refuses the whole apply, naming every path, when a real-tree path changed since the session
    copied it (or since `changes` was computed), or a path the session created exists in the
    real tree now (unless that real file is exactly what the index has: nothing is lost);
    `force` writes anyway. `merged` (`merge_onto_head`, blobs in `scratch`): the content of
    paths where the merge onto the worktree's HEAD is not the view's, and its conflicts.
    """
    root = _workdir(repo)
    selected = list(changes.changes)
    if merged is not None and merged.conflicts:
        return WorktreeResult((), (), merged.conflicts, dry_run)
    over = merged.entries if merged is not None else {}
    targets = [
        _merged_target(scratch or repo, c.path, over[c.path])
        if c.path in over
        else _session_target(view, c)
        for c in selected
    ]
    plan = _plan_writes(root, targets)
    conflicts = list(plan.conflicts)
    if not force:
        found = worktree_conflicts(view, root, selected, lambda p: _staged(repo, root, p))
        if merged is not None and merged.head_tree is not None:
            # A real file that is exactly the HEAD's was changed by the commits merged onto,
            # not by hand: the merge holds that change, and overwriting it loses nothing.
            head = _tree(scratch or repo, merged.head_tree)
            by_path = {c.path: c for c in selected}
            found = [
                c
                for c in found
                if c.path not in by_path or not _clean_for_merge(head, root, by_path[c.path])
            ]
        conflicts += found
    if conflicts:
        return WorktreeResult((), (), _unique(conflicts), dry_run)
    applied = tuple(t.path for t in plan.targets)
    changed_dirs = () if dry_run else write_targets(root, _read_first(root, plan.targets))
    return WorktreeResult(applied, plan.skipped, (), dry_run, changed_dirs)


def _merged_target(repo: pygit2.Repository, path: str, entry: tuple[str, int] | None) -> Target:
    if entry is None:
        return Target(path, None, 0, None)
    oid, mode = entry
    kind: StateKind = "symlink" if mode == GIT_LINK else "file"
    perm = (0o777 if mode == GIT_EXEC else 0o666) & ~_umask()
    return Target(path, kind, perm, partial(_blob_data, repo, pygit2.Oid(hex=oid)))


def _constant(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _read_first(root: Path, targets: Sequence[Target]) -> list[Target]:
    """The targets with every content the writes will need already read. The view reads what
    the session left unchanged from the real tree, which the removals change: a directory the
    session renamed still reads its files from the old real path, removed before the new one
    is written. Costs memory for every rewritten file at once, not one at a time, but for a
    big file: that one is written beside its path at once, to be renamed in."""
    base = f"{root}/"
    out = []
    for t in targets:
        read = t.content
        if read is not None and (t.rewrite or _real_kind(base + t.path) != t.kind):
            parent = base + t.path.rpartition("/")[0]
            aside = None
            if t.big is not None and _real_kind(parent) == "dir":
                aside = _write_aside(base, t, t.big)
            if aside is not None:
                t = replace(t, content=None, big=None, aside=aside)
            else:
                t = replace(t, content=_constant(read()))
        out.append(t)
    return out


def _write_aside(base: str, target: Target, big: BigFile) -> str | None:
    """`big` written beside the target's path; None (nothing left there) when its content is
    no longer the blob the apply means (the file changed since)."""
    parent, _, name = target.path.rpartition("/")
    aside = f"{base}{parent}/" if parent else base
    aside += f".{name}.gitsess-{os.getpid()}.tmp"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with big.open() as f, progress.reading(f, big.path, big.size) as read:
            hashed = HashingReader(read, big.size)
            for chunk in iter(partial(hashed.read, CHUNK), b""):
                _write_all(fd, chunk)
        os.fchmod(fd, target.perm)
        if str(hashed.blob_id()) != big.oid:
            os.unlink(aside)
            return None
    except BaseException:
        os.unlink(aside)
        raise
    finally:
        os.close(fd)
    return aside


# ---------------------------------------------------------------------------------------------
# --patch


def make_patch(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    mbox: bool = False,
    message: str = "",
    author: pygit2.Signature | None = None,
    find_renames: bool = True,
    dry_run: bool = False,
    merged: Merged | None = None,
    scratch: pygit2.Repository | None = None,
) -> PatchResult:
    """A patch of the changes against the real worktree, binary files included (git's
    `--binary` form), which `git apply` takes in that worktree. With `mbox`, a `git am` mail
    (From line, From:, Date:, Subject: from `message`'s first paragraph, `author`'s time)."""
    result = diff_changes(
        repo, view, changes, binary=True, find_renames=find_renames, scratch=scratch,
        merged=merged.entries if merged is not None else None,
    )  # fmt: skip
    paths: list[str] = []
    for f in result.files:
        paths.extend(p for p in (f.old_path, f.new_path) if p is not None and p not in paths)
    skipped = left_out_by_git(changes)
    body = spooled()
    if mbox and result.files:
        body.write(mbox_head(message, author or signature(repo, "AUTHOR"), result.stat))
        result.write_patch(body)
        body.write(MBOX_TAIL)
    else:
        result.write_patch(body)
    return PatchResult(body, tuple(paths), skipped, dry_run)


def left_out_by_git(changes: ChangeSet) -> tuple[str, ...]:
    """What a commit or patch cannot carry, which stays in the session: changes git does not
    see (permission bits, empty directories), devices, fifos and sockets."""
    carried = carried_by_git(changes)
    return tuple(sorted([*(p for p in changes.paths if p not in carried), *changes.special]))


def carried_by_git(changes: ChangeSet) -> set[str]:
    """Paths whose change a commit or patch carries: git-visible ones, and directories that
    appear or disappear with git-visible changes below them (git has no directories of its
    own; their permission bits are not carried)."""
    carried = {c.path for c in changes.changes if c.git_visible}
    holding = {parent for path in carried for parent in _parents(path)}
    for change in changes.changes:
        appears_or_goes = (change.old is None or change.old.kind != "dir") != (
            change.new is None or change.new.kind != "dir"
        )
        if appears_or_goes and change.path in holding:
            carried.add(change.path)
    return carried


def _parents(path: str) -> Iterable[str]:
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


def mbox_mail(message: str, author: pygit2.Signature, stat_text: str, patch: bytes) -> bytes:
    return mbox_head(message, author, stat_text) + patch + MBOX_TAIL


MBOX_TAIL = b"-- \ngitsess\n\n"


def mbox_head(message: str, author: pygit2.Signature, stat_text: str) -> bytes:
    """A `git am` mail up to its patch."""
    subject, body = _split_message(message)
    zone = timezone(timedelta(minutes=author.offset))
    when = datetime.fromtimestamp(author.time, UTC).astimezone(zone)
    head = [
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
        f"From: {_address(author.name, author.email)}",
        f"Date: {email.utils.format_datetime(when)}",
        f"Subject: {_header_text('[PATCH] ' + subject)}",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=UTF-8",
        "Content-Transfer-Encoding: 8bit",
        "",
    ]
    text = "\n".join(head) + "\n" + (body + "\n" if body else "") + "---\n" + stat_text + "\n"
    return text.encode()


def _split_message(message: str) -> tuple[str, str]:
    """Subject (first paragraph on one line) and body, as git format-patch does."""
    paragraphs = message.strip().split("\n\n", 1)
    subject = " ".join(line.strip() for line in paragraphs[0].splitlines()) or "gitsess changes"
    body = paragraphs[1].strip("\n") + "\n" if len(paragraphs) > 1 else ""
    return subject, body


def _header_text(text: str) -> str:
    if text.isascii():
        return text
    return Header(text, "utf-8").encode()


def _address(name: str, addr: str) -> str:
    if name.isascii():
        return f"{name} <{addr}>"
    return f"{Header(name, 'utf-8').encode()} <{addr}>"


# ---------------------------------------------------------------------------------------------
# --commit


def apply_commit(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    branch: str,
    base: str | None,
    message: str,
    author: pygit2.Signature | None = None,
    committer: pygit2.Signature | None = None,
    force: bool = False,
    dry_run: bool = False,
    on_prepared: Callable[[CommitResult], None] | None = None,
    scratch: ScratchRepository | None = None,
    onto: str | None = None,
    undo: Mapping[str, tuple[str, int] | None] | None = None,
) -> CommitResult:
    """Commit the changes on `branch` (a name or a full ref) on top of its tip; a branch that
    does not exist is created at `base`.

    `repo` is opened on the session's bound worktree; `base` is the commit the session started
    from (None: the tip). When the branch is checked out in that worktree, its files and index
    are brought to the commit for every applied path (so `git status` is clean for them), with
    the same conflict checks as `apply_worktree` (`force` skips those). The branch ref moves
    last, compare-and-swap against the tip read at the start. `on_prepared` is called with the
    final result once the commit object exists and before anything visible changes: the place
    to journal the apply so a crash can be completed with `finish_commit`. `scratch` is the
    scratch repository `changes` was computed with (its `store`), if any; else one is made.

    `onto` is where the session's own commits now end on this branch (`replay_commits`): the
    changes are committed on top of it, with `base` the session's HEAD, and the ref moves from
    its tip to the result (to `onto` itself when there is nothing more). `undo` gives base
    entries for paths the session's commits changed that the view shows as the worktree has
    them: no change of the delta's, yet the commit must not keep the session commit's version.
    """
    if not message.strip():
        raise GitsessError("a commit needs a message")
    # Before any work: without them, the objects copied in would be for nothing.
    author = author or signature(repo, "AUTHOR")
    committer = committer or signature(repo, "COMMITTER")
    ref = _branch_ref(branch)
    tip = _ref_target(repo, ref)
    # a branch that does not exist yet starts at the session's base
    new_branch = tip is None and base is not None
    tip = tip or base
    base = base or tip
    mode = _worktree_mode(repo, ref)
    bound = mode == "bound"
    moves_from = tip if onto is not None and onto != tip and not new_branch else None
    start = onto if onto is not None else tip
    result = CommitResult(
        ref, start, base, None, None, False, (), (), (), bound, (), dry_run,
        new_branch=new_branch, moves_from=moves_from,
    )  # fmt: skip
    if mode == "elsewhere":
        holder = checked_out_at(_common_repo(repo), ref.removeprefix("refs/heads/"))
        conflict = Conflict(ref, "checked-out-elsewhere", f"the branch is checked out at {holder}")
        return replace(result, conflicts=(conflict,))
    promoted = onto is not None and (onto != tip or new_branch)
    if not changes.git_changes() and not undo and not promoted:
        return replace(result, skipped=tuple(changes.paths))
    with scratch_repo(repo) if scratch is None else nullcontext(scratch) as scratch:
        build = _build_commit_tree(scratch, view, changes, start, base, undo or {})
        result = replace(result, merged=build.merged, conflicts=build.conflicts)
        if build.tree is None:
            return result
        # The bound worktree is at the branch's tip, which is not where the commit starts when
        # the session's own commits were replayed first: compare it with what it has.
        checked_out = commit_tree(scratch, tip) if start != tip else build.tip_tree
        update = (
            _plan_commit_worktree(repo, scratch, view, changes, build, force, checked_out)
            if bound
            else None
        )
        result = replace(result, tree=build.tree, **_outcome(changes, update))
        if result.conflicts or dry_run:
            return result
        copy_objects(scratch, repo, build.tree)
        if build.tree != build.tip_tree or start is None:  # else the tip has every change
            commit = _create_commit(repo, build.tree, start, message, author, committer)
            result = replace(result, commit=commit)
        elif promoted:
            result = replace(result, commit=start)
        if on_prepared is not None:
            on_prepared(result)
        return replace(result, changed_dirs=finish_commit(repo, result, scratch, view))


def finish_commit(
    repo: pygit2.Repository,
    result: CommitResult,
    objects: pygit2.Repository | None = None,
    view: SessionView | None = None,
) -> tuple[str, ...]:
    """Make a prepared commit visible: worktree files, index, then the branch ref.

    Idempotent, so a journaled `CommitResult` of an apply that was killed half-way completes
    by calling this again. The ref moves only from `result.parent` (or is already there).
    Returns the real directories whose entries changed. `objects` is where the commit's trees
    and blobs are read (default `repo`, which must have them): the apply passes its scratch
    repository, which still holds them in memory. A file is read from `view`, when given and
    still holding the committed bytes, rather than from the object store.
    """
    changed_dirs: tuple[str, ...] = ()
    if result.worktree_updated and result.tree is not None:
        _check_ref(repo, result)
        source = objects or repo
        tree = _tree(source, result.tree)
        targets = [_commit_target(source, tree, write, view) for write in result.updated]
        changed_dirs = write_targets(_workdir(repo), targets)
        _update_index(repo, tree, result.updated_paths)
    if result.commit is not None:
        _move_ref(repo, result)
    return changed_dirs


def _commit_target(
    repo: pygit2.Repository, tree: pygit2.Tree, write: PathWrite, view: SessionView | None
) -> Target:
    if write.kind not in ("file", "symlink") or not write.rewrite:
        return Target(write.path, write.kind, write.perm, None, write.rewrite)
    oid = tree[write.path].id
    big = None
    if write.kind == "file" and view is not None:
        content = partial(_view_or_blob, repo, view, write.path, oid)
        entry = view.entry(write.path)
        if entry is not None and entry.size > BIG_FILE:
            big = BigFile(write.path, str(oid), entry.size, partial(view.open, write.path))
    else:
        content = partial(_blob_data, repo, oid)
    return Target(write.path, write.kind, write.perm, content, write.rewrite, big)


def _view_or_blob(repo: pygit2.Repository, view: SessionView, path: str, oid: pygit2.Oid) -> bytes:
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


def _blob_data(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    kept = _kept(repo, oid)
    return kept if kept is not None else _stored_blob(repo, oid)


def _kept(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes | None:
    return repo.blob_data(oid) if isinstance(repo, ScratchRepository) else None


def _stored_blob(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    blob = repo.get(oid)
    assert isinstance(blob, pygit2.Blob)
    return blob.data


@dataclass(frozen=True)
class _Build:
    tree: str | None  # the commit's tree; None on conflict
    tip_tree: str
    merged: bool
    conflicts: tuple[Conflict, ...]
    session_entries: dict[str, tuple[str, int] | None]  # git state of each session path
    undone: frozenset[str] = frozenset()  # `undo` paths: the worktree already has them


def _build_commit_tree(
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    tip: str | None,
    base: str | None,
    undo: Mapping[str, tuple[str, int] | None],
) -> _Build:
    """Base tree + the session's git-visible changes, merged onto the tip when it moved."""
    git_changes = changes.git_changes()
    entries = {c.path: store_view_blob(scratch, view, c) for c in git_changes}
    base_tree = commit_tree(scratch, base)
    tip_tree = commit_tree(scratch, tip)
    theirs = edit_tree(scratch, base_tree, {**undo, **entries})
    undone = frozenset(undo) - set(entries)
    if tip == base:
        return _Build(theirs, tip_tree, False, (), entries, undone)
    tip_obj = _tree(scratch, tip_tree)
    own_base = {
        c.path: c.git_old
        for c in git_changes
        if _preimage_known(view, c) and c.git_old == _tree_entry(tip_obj, c.path)
    }
    ancestor = edit_tree(scratch, base_tree, own_base)
    if ancestor == tip_tree:
        return _Build(theirs, tip_tree, False, (), entries, undone)
    merged = scratch.merge_trees(ancestor, tip_tree, theirs)
    if merged.conflicts is not None:
        details = {_conflict_path(entry): _merge_detail(entry) for entry in merged.conflicts}
        conflicts = tuple(Conflict(p, "merge", details[p]) for p in sorted(details))
        return _Build(None, tip_tree, True, conflicts, entries, undone)
    return _Build(str(merged.write_tree(scratch)), tip_tree, True, (), entries, undone)


def _conflict_path(
    entries: tuple[pygit2.IndexEntry | None, pygit2.IndexEntry | None, pygit2.IndexEntry | None],
) -> str:
    return next(str(e.path) for e in entries if e is not None)


def _merge_detail(
    entries: tuple[pygit2.IndexEntry | None, pygit2.IndexEntry | None, pygit2.IndexEntry | None],
) -> str:
    """What each side did to a path that conflicts (base, the branch's tip, the session)."""
    base, branch, session = entries
    if base is None:
        return "added on the branch and in the session, with different content"
    if session is None:
        return "removed in the session, changed on the branch"
    if branch is None:
        return "changed in the session, removed on the branch"
    return "changed on the branch and in the session"


def _preimage_known(view: SessionView, change: Change) -> bool:
    """Whether the session's edit of this path was made on top of today's real file."""
    record = view.copied_from(change.path)
    if record is None:
        return change.old is None
    return change.old is not None and _same_stat(record, _entry_of(change.old))


def store_view_blob(
    scratch: pygit2.Repository, view: SessionView, change: Change
) -> tuple[str, int] | None:
    """Store the view's side of a change in `scratch`; its (blob id, git mode), None if gone."""
    entry = change.git_new
    if entry is None or change.new is None:
        return None
    if pygit2.Oid(hex=entry[0]) in scratch.odb:
        return entry  # kept when the change was computed (or already in the repository)
    if change.new.kind == "file" and change.new.size > BIG_FILE:
        assert isinstance(scratch, ScratchRepository)
        size = change.new.size
        with view.open(change.path) as f, progress.reading(f, change.path, size) as read:
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
    original = _tree(repo, tree)
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


def _tree(repo: pygit2.Repository, oid: str) -> pygit2.Tree:
    tree = repo.get(oid)
    if not isinstance(tree, pygit2.Tree):
        raise GitsessError(f"{oid} is not a tree")
    return tree


def _tree_entry(tree: pygit2.Tree, path: str) -> tuple[str, int] | None:
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.type != ObjectType.BLOB:
        return None
    return str(obj.id), int(obj.filemode)


def copy_objects(src: ScratchRepository, dest: pygit2.Repository, tree: str) -> None:
    """Copy the objects of `tree` that were made in `src`, a scratch repository over `dest`
    (one `dest` has holds a complete subtree there): as one pack when there are many
    (`packwrite`), else as loose objects.

    Loose ones are written to `dest`'s loose store alone: through the repository's object
    database, every write first asks each backend whether it has the object, and each miss
    makes libgit2 rescan the pack directory (2,600 directory opens for 1,000 objects)."""
    made: list[packwrite.Entry] = []
    pending = [pygit2.Oid(hex=tree)]
    while pending:
        oid = pending.pop()
        found = src.created(oid)
        if found is None:
            continue
        kind, data = found
        if kind == ObjectType.TREE:
            subtree = src.get(oid)
            assert isinstance(subtree, pygit2.Tree)
            pending.extend(entry.id for entry in subtree if entry.type != ObjectType.COMMIT)
        made.append((oid, kind, data))
    config = dest.config
    fsync = "core.fsyncObjectFiles" in config and config.get_bool("core.fsyncObjectFiles")
    objects = common_dir(dest) / "objects"
    if packwrite.fits(made):
        packwrite.write_pack(objects, made, fsync)
        return
    # As libgit2 writes them: zlib's fastest level, as git's default core.looseCompression.
    odb = pygit2.Odb()
    odb.add_backend(pygit2.OdbBackendLoose(str(objects), 1, fsync), 1)
    for _, kind, data in made:
        odb.write(kind, data)


def _create_commit(
    repo: pygit2.Repository,
    tree: str,
    parent: str | None,
    message: str,
    author: pygit2.Signature,
    committer: pygit2.Signature,
) -> str:
    parents = [pygit2.Oid(hex=parent)] if parent else []
    text = message if message.endswith("\n") else message + "\n"
    oid = repo.create_commit(None, author, committer, text, pygit2.Oid(hex=tree), parents)
    return str(oid)


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


def _branch_ref(branch: str) -> str:
    ref = branch if branch.startswith("refs/") else "refs/heads/" + branch
    if not pygit2.reference_is_valid_name(ref):
        raise GitsessError(f"{branch!r} is not a valid branch name")
    return ref


def branch_tip(repo: pygit2.Repository, branch: str) -> str | None:
    """The commit `branch` (a name or a full ref) is at; None when it does not exist."""
    return _ref_target(repo, _branch_ref(branch))


def _ref_target(repo: pygit2.Repository, ref: str) -> str | None:
    try:
        target = repo.references[ref].resolve().target
    except KeyError:
        return None
    return str(target)


def _check_ref(repo: pygit2.Repository, result: CommitResult) -> None:
    now = _ref_target(repo, result.branch)
    before = None if result.new_branch else result.expected_tip
    if now not in (before, result.commit):
        raise GitsessError(f"{result.branch} moved to {now} during the apply; run it again")


def _move_ref(repo: pygit2.Repository, result: CommitResult) -> None:
    assert result.commit is not None
    new = pygit2.Oid(hex=result.commit)
    log = "gitsess apply: commit"
    if result.parent is None or result.new_branch:
        if _ref_target(repo, result.branch) != result.commit:
            # force=False: fails if someone created the branch meanwhile
            repo.create_reference_direct(result.branch, new, False, message=log)
        return
    current = repo.references[result.branch]
    if str(current.target) == result.commit:
        return
    if str(current.target) != result.expected_tip:
        raise GitsessError(f"{result.branch} moved during the apply; run it again")
    try:
        current.set_target(new, log)  # compare-and-swap against the value just read
    except pygit2.GitError as e:
        raise GitsessError(f"{result.branch} moved during the apply: {e}") from e


def _common_repo(repo: pygit2.Repository) -> pygit2.Repository:
    return pygit2.Repository(str(common_dir(repo)))


def _worktree_mode(repo: pygit2.Repository, ref: str) -> str:
    """ "bound": checked out in `repo`'s worktree; "elsewhere": in another; "none"."""
    if not ref.startswith("refs/heads/"):
        return "none"
    holder = checked_out_at(_common_repo(repo), ref.removeprefix("refs/heads/"))
    if holder is None:
        return "none"
    return "bound" if holder.resolve() == _workdir(repo).resolve() else "elsewhere"


# ---------------------------------------------------------------------------------------------
# the checked-out worktree after a commit


@dataclass(frozen=True)
class _CommitWorktree:
    targets: tuple[Target, ...]
    conflicts: tuple[Conflict, ...]
    skipped: tuple[str, ...]


def _outcome(changes: ChangeSet, update: _CommitWorktree | None) -> dict[str, Any]:
    """Result fields: with the worktree updated every selected path is applied (bar directories
    that must stay); otherwise only what git holds is, the rest stays in the session."""
    if update is None:
        carried = carried_by_git(changes)
        applied = tuple(c.path for c in changes.changes if c.path in carried)
        return {"applied": applied, "skipped": left_out_by_git(changes)}
    skipped_set = set(update.skipped)
    return {
        "applied": tuple(c.path for c in changes.changes if c.path not in skipped_set),
        "skipped": tuple(sorted([*update.skipped, *changes.special])),
        "conflicts": update.conflicts,
        "updated": tuple(PathWrite(t.path, t.kind, t.perm, t.rewrite) for t in update.targets),
    }


def _plan_commit_worktree(
    repo: pygit2.Repository,
    scratch: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    build: _Build,
    force: bool,
    checked_out: str,
) -> _CommitWorktree:
    """The real-tree writes that bring the bound worktree (at tree `checked_out`) to the
    commit, and their conflicts: every session path gets its view state (the merged content
    where the merge changed it), and every other path the commit changes gets its content."""
    assert build.tree is not None
    root = _workdir(repo)
    tree = _tree(scratch, build.tree)
    session = {c.path: c for c in changes.changes}
    targets: list[Target] = []
    for change in changes.changes:
        entry = _tree_entry(tree, change.path)
        if not change.git_visible or entry == build.session_entries[change.path]:
            targets.append(_session_target(view, change))
        else:
            targets.append(_tree_target(tree, change.path))  # the merge changed it
    merged_paths = _tree_diff_paths(scratch, checked_out, build.tree) - set(session)
    merged_paths -= build.undone
    targets.extend(_tree_target(tree, path) for path in sorted(merged_paths))
    plan = _plan_writes(root, targets)
    conflicts = list(plan.conflicts)
    if not force:
        kept = {t.path for t in plan.targets}
        tip_tree = _tree(scratch, checked_out)
        for change in changes.changes:
            if change.path not in kept:
                continue
            # the lstat checks first: hashing the real file is needed only when they object
            found = worktree_conflicts(view, root, [change])
            if found and not _clean_for_merge(tip_tree, root, change):
                conflicts.extend(found)
        conflicts += _local_changes(tip_tree, root, merged_paths)
    return _CommitWorktree(plan.targets, _unique(conflicts), plan.skipped)


def _clean_for_merge(tip_tree: pygit2.Tree, root: Path, change: Change) -> bool:
    """A real path that is exactly the tip's (committed, no local edit) can be overwritten with
    the merge result whatever happened to it since the copy-up: the merge holds the tip."""
    if not change.git_visible:
        return False
    return _real_git_entry(root, change.path) == _tree_entry(tip_tree, change.path)


def _tree_diff_paths(repo: pygit2.Repository, a: str, b: str) -> set[str]:
    diff = _tree(repo, a).diff_to_tree(_tree(repo, b))
    paths: set[str] = set()
    for delta in diff.deltas:
        paths.add(delta.old_file.path)
        paths.add(delta.new_file.path)
    return paths


def _local_changes(tip_tree: pygit2.Tree, root: Path, paths: Iterable[str]) -> list[Conflict]:
    """Paths the merge rewrites whose real file is not the tip's (an uncommitted change)."""
    conflicts = []
    for path in sorted(paths):
        if _real_git_entry(root, path) != _tree_entry(tip_tree, path):
            conflicts.append(Conflict(path, "local-change", "has uncommitted changes"))
    return conflicts


def _real_git_entry(root: Path, path: str) -> tuple[str, int] | None:
    full = root / path
    try:
        st = full.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(st.st_mode):
        return str(blob_id(os.fsencode(full.readlink()))), GIT_LINK
    if stat.S_ISREG(st.st_mode):
        mode = GIT_EXEC if st.st_mode & stat.S_IXUSR else 0o100644
        return str(file_blob_id(str(full))), mode
    return None


def _update_index(repo: pygit2.Repository, tree: pygit2.Tree, paths: Iterable[str]) -> None:
    """Stage each path as the commit has it, with stat data of the file just written (so git
    sees it clean without hashing it again)."""
    root = _workdir(repo)
    index = repo.index
    index.read(force=True)
    entries = {path: _tree_entry(tree, path) for path in paths}
    for path in sorted(entries, key=lambda p: entries[p] is not None):  # removals first
        entry = entries[path]
        if entry is None:
            if path in index:
                index.remove(path)
            continue
        # libgit2 drops what is in the way (see edit_tree)
        full = f"{root}/{path}"  # a Path per file costs more than its lstat
        index.add(_StatEntry(path, pygit2.Oid(hex=entry[0]), FileMode(entry[1]), full))
    index.write()


class _StatEntry(pygit2.IndexEntry):
    """An index entry carrying the file's stat data.

    pygit2's IndexEntry has only path, id and mode, so its C struct gets the stat fields here
    (through pygit2's private `_to_c`; without it the entry is still right, git just re-hashes
    the file once). `Index.add(path)` would do this too, but it re-reads, re-hashes and
    re-compresses the file into the object database: seconds for a large file.
    """

    def __init__(self, path: str, oid: pygit2.Oid, mode: FileMode, full: str) -> None:
        super().__init__(path, oid, mode)
        self.stat = os.lstat(full)

    def _to_c(self) -> Any:
        centry, keep = super()._to_c()
        st = self.stat
        for field, ns in (("ctime", st.st_ctime_ns), ("mtime", st.st_mtime_ns)):
            stamp = getattr(centry, field)
            stamp.seconds = (ns // 1_000_000_000) & 0x7FFFFFFF
            stamp.nanoseconds = ns % 1_000_000_000
        # git keeps the low 32 bits of these, as the index format has no room for more
        centry.dev = st.st_dev & 0xFFFFFFFF
        centry.ino = st.st_ino & 0xFFFFFFFF
        centry.uid = st.st_uid & 0xFFFFFFFF
        centry.gid = st.st_gid & 0xFFFFFFFF
        centry.file_size = st.st_size & 0xFFFFFFFF
        return centry, keep


# ---------------------------------------------------------------------------------------------
# conflicts with the real tree


def worktree_conflicts(
    view: SessionView,
    root: Path,
    changes: Sequence[Change],
    staged: Callable[[str], bool] = lambda path: False,
) -> list[Conflict]:
    """Paths whose real state is not what the session's change was made against.

    A recorded copy-up (`copied_from`) must match the real file's lstat now; a path the session
    created must still be absent, unless `staged` says the real file there is safe in git; a
    deleted path with no record of its own is checked through the nearest recorded parent
    directory. And every path must still be as `compute_changes` saw it.
    """
    conflicts: list[Conflict] = []
    for change in changes:
        conflict = _conflict_for(view, root, change, staged)
        if conflict is not None:
            conflicts.append(conflict)
    return conflicts


def _conflict_for(
    view: SessionView, root: Path, change: Change, staged: Callable[[str], bool]
) -> Conflict | None:
    now = _lstat_entry(f"{root}/{change.path}")  # a Path per file costs more than its lstat
    seen = _entry_of(change.old) if change.old is not None else None
    if not _same_stat(now, seen):
        return Conflict(change.path, "worktree-changed", "changed in the real tree meanwhile")
    record = view.copied_from(change.path)
    if record is not None:
        # nothing real to lose when the path is absent (and the overlay reports the origin of
        # a renamed file as the record of its new name, which the real tree never had)
        if now is not None and not _same_stat(now, record):
            return Conflict(
                change.path,
                "worktree-changed",
                "changed in the real tree since the session copied it",
            )
        return None
    if change.old is None:
        return None
    if change.new is None:
        parent = _parent_conflict(view, root, change.path)
        if parent is not None or change.old.kind == "dir":
            return parent  # a directory's files are changes of their own
        return _removal_conflict(view, root, change, staged)
    # The overlay keeps no record for a file the session deleted and then wrote anew, so
    # "created" may well be "replaced": a real file identical to its index entry loses
    # nothing when overwritten.
    if staged(change.path):
        return None
    return Conflict(change.path, "worktree-exists", "created in the session and in the real tree")


def _removal_conflict(
    view: SessionView, root: Path, change: Change, staged: Callable[[str], bool]
) -> Conflict | None:
    """A real file the session removed with no record of what it removed: removing it loses
    nothing when git holds it as it is, or when it is older than the session's removal."""
    if staged(change.path):
        return None
    removed = view.removed_at(change.path)
    with suppress(OSError):
        if removed is not None and os.lstat(f"{root}/{change.path}").st_ctime_ns <= removed:
            return None
    return Conflict(
        change.path,
        "worktree-changed",
        "removed in the session, but the real file may have changed since (git does not hold"
        " it as it is)",
    )


def _staged(repo: pygit2.Repository, root: Path, path: str) -> bool:
    """Whether the real file or symlink at `path` is exactly its entry in the index."""
    try:
        entry = repo.index[path]
    except KeyError:
        return False
    return _real_git_entry(root, path) == (str(entry.id), int(entry.mode))


def _parent_conflict(view: SessionView, root: Path, path: str) -> Conflict | None:
    parent = path.rpartition("/")[0]
    while parent:
        record = view.copied_from(parent)
        if record is not None:
            if _same_stat(_lstat_entry(root / parent), record):
                return None
            return Conflict(path, "parent-changed", f"{parent} changed in the real tree")
        parent = parent.rpartition("/")[0]
    return None


def _entry_of(state: State) -> Entry:
    return Entry(state.kind, state.mode, state.size, state.mtime_ns)


def _lstat_entry(path: str | Path) -> Entry | None:
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(st.st_mode):
        kind: Kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return Entry(kind, st.st_mode, st.st_size, st.st_mtime_ns)


def _same_stat(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.kind, a.mode, a.mtime_ns) == (b.kind, b.mode, b.mtime_ns) and (
        a.kind == "dir" or a.size == b.size  # a directory's size says nothing about its entries
    )


def _unique(conflicts: Iterable[Conflict]) -> tuple[Conflict, ...]:
    seen: dict[str, Conflict] = {}
    for conflict in conflicts:
        seen.setdefault(conflict.path, conflict)
    return tuple(sorted(seen.values(), key=lambda c: c.path))


# ---------------------------------------------------------------------------------------------
# writing the real tree


@dataclass(frozen=True)
class Target:
    """What one real-tree path must become. `content` gives a file's bytes or a link's target;
    `rewrite` False means only the permission bits change."""

    path: str
    kind: StateKind | None  # None: the path goes away
    perm: int
    content: Callable[[], bytes] | None
    rewrite: bool = True
    big: BigFile | None = None  # a file too big to hold: copied in parts, not `content`
    aside: str | None = None  # the file already written beside the path, to be renamed in


def _session_target(view: SessionView, change: Change) -> Target:
    new = change.new
    if new is None:
        return Target(change.path, None, 0, None)
    same_content = change.old is not None and (change.old.kind, change.old.oid) == (
        new.kind,
        new.oid,
    )
    # Never setuid, setgid or sticky: git carries none of them, and with `--allow-other`
    # another user may have set them on a file of the view for the apply to write.
    perm = new.perm & 0o777
    if new.kind == "dir":
        return Target(change.path, "dir", perm, None)
    big = None
    if new.kind == "file" and new.size > BIG_FILE and new.oid is not None:
        big = BigFile(change.path, new.oid, new.size, partial(view.open, change.path))
    return Target(
        change.path,
        new.kind,
        perm,
        lambda: read_view(view, change.path, new),
        rewrite=not same_content,
        big=big,
    )


def _tree_target(tree: pygit2.Tree, path: str) -> Target:
    """The path as the commit's tree has it, with git's default permissions (planning only:
    the content is read from the repository when the commit is finished)."""
    try:
        obj = tree[path]
    except KeyError:
        return Target(path, None, 0, None)
    if obj.type != ObjectType.BLOB:
        return Target(path, None, 0, None)  # a directory now: its files are targets of their own
    mode = int(obj.filemode)
    kind: StateKind = "symlink" if mode == GIT_LINK else "file"
    default = (0o777 if mode == GIT_EXEC else 0o666) & ~_umask()
    return Target(path, kind, default, None)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class _WritePlan:
    targets: tuple[Target, ...]
    skipped: tuple[str, ...]
    conflicts: tuple[Conflict, ...]


def _plan_writes(root: Path, targets: Sequence[Target]) -> _WritePlan:
    """Drop directory removals that cannot happen because the directory keeps paths this apply
    does not touch (excluded by pathspec or ignore rules): a plain removal is skipped, a
    directory that must become a file or symlink is a conflict."""
    by_path = {t.path: t for t in targets}
    kinds = _RealKinds(root)
    gone = {t.path for t in targets if _replaces(kinds, t)}
    skipped: list[str] = []
    conflicts: list[Conflict] = []
    for path in sorted(gone, key=lambda p: -p.count("/")):
        if kinds[path] != "dir":
            continue
        left = _leftovers(root, path, gone)
        if not left:
            continue
        gone.discard(path)
        target = by_path[path]
        if target.kind is None:
            skipped.append(path)
        else:
            conflicts.append(
                Conflict(path, "not-empty", f"directory holds paths outside this apply: {left[0]}")
            )
    conflicts += _blocked_parents(kinds, targets, by_path)
    kept = tuple(t for t in targets if t.path not in skipped)
    return _WritePlan(kept, tuple(sorted(skipped)), tuple(conflicts))


def _blocked_parents(
    kinds: _RealKinds, targets: Sequence[Target], by_path: dict[str, Target]
) -> list[Conflict]:
    """A path to create below a real file or symlink that this apply does not turn into a
    directory (its change was left out by a pathspec) cannot be written."""
    conflicts = []
    for target in targets:
        if target.kind is None:
            continue
        for parent in _parents(target.path):
            planned = by_path.get(parent)
            if planned is not None:
                if planned.kind != "dir":
                    conflicts.append(Conflict(target.path, "not-a-directory", f"{parent} is not"))
                break  # the plan makes this parent (and so those above it) a directory
            if kinds[parent] not in (None, "dir"):
                conflicts.append(
                    Conflict(target.path, "not-a-directory", f"{parent} is not a directory")
                )
                break
    return conflicts


def _replaces(kinds: _RealKinds, target: Target) -> bool:
    """Whether the real path has to be removed first (gone, or of another kind)."""
    current = kinds[target.path]
    return current is not None and (target.kind is None or current != target.kind)


class _RealKinds(dict[str, StateKind | None]):
    """The real tree's kind of each path asked about, lstat'ed once: planning asks about the
    same parent directories for every path below them. Only while nothing is written."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.prefix = f"{root}/"

    def __missing__(self, path: str) -> StateKind | None:
        kind = self[path] = _real_kind(self.prefix + path)
        return kind


def _leftovers(root: Path, top: str, gone: set[str]) -> list[str]:
    left = []
    for dirpath, dirnames, filenames in os.walk(root / top):
        rel = Path(dirpath).relative_to(root).as_posix()
        for name in dirnames + filenames:
            child = f"{rel}/{name}"
            if child not in gone:
                left.append(child)
    return sorted(left)


def _real_kind(path: str | Path) -> StateKind | None:
    entry = _lstat_entry(path)
    if entry is None or entry.kind == "other":
        return None
    kind: StateKind = entry.kind
    return kind


def write_targets(root: Path, targets: Sequence[Target]) -> tuple[str, ...]:
    """Removals deepest first, then creations shallowest first, then directory permissions
    deepest first (a read-only directory gets its mode after its entries are in). Returns the
    directories whose entries changed."""
    base = f"{root}/"  # str paths: a Path per file costs more than the system calls here
    changed: set[str] = set()
    for target in sorted(targets, key=lambda t: t.path, reverse=True):
        current = _real_kind(base + target.path)
        if current is not None and (target.kind is None or current != target.kind):
            _remove(base + target.path, current)
            changed.add(target.path.rpartition("/")[0])
    # directories known to exist from here on: creations never remove one
    present: set[str] = {""}
    for target in sorted(targets, key=lambda t: t.path):
        if target.kind is not None:
            changed.update(_create(base, target, present))
    for target in sorted(targets, key=lambda t: t.path, reverse=True):
        if target.kind == "dir":
            os.chmod(base + target.path, target.perm)
    return tuple(sorted(changed))


def _remove(path: str, kind: StateKind) -> None:
    if kind == "dir":
        os.rmdir(path)
    else:
        os.unlink(path)


def _create(base: str, target: Target, present: set[str]) -> list[str]:
    """Bring one path (below `base`, the root with a trailing slash) to its target; returns the
    directories that got a new or replaced entry (including those of parents it had to
    create). `present` holds directories known to exist, and gets those made here."""
    path = base + target.path
    changed = _make_parents(base, target.path, present)
    parent, _, name = target.path.rpartition("/")
    if target.kind == "dir":
        if target.path not in present and not os.path.isdir(path):
            os.mkdir(path)
            changed.append(parent)
        present.add(target.path)
        return changed
    if not target.rewrite and _real_kind(path) == target.kind:
        if target.kind == "file":
            os.chmod(path, target.perm)
        return changed
    aside = target.aside
    if aside is None and target.big is not None:
        aside = _write_aside(base, target, target.big)
    if aside is not None:
        os.replace(aside, path)
        return [*changed, parent]
    assert target.content is not None
    if target.kind == "file" and _rewrite_in_place(path, target.content, target.perm):
        return changed
    folder = f"{base}{parent}/" if parent else base
    tmp = f"{folder}.{name}.gitsess-{os.getpid()}.tmp"
    if target.kind == "symlink":
        os.symlink(os.fsdecode(target.content()), tmp)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            _write_all(fd, target.content())
            os.fchmod(fd, target.perm)
        finally:
            os.close(fd)
    os.replace(tmp, path)
    return [*changed, parent]


def _rewrite_in_place(path: str, content: Callable[[], bytes], perm: int) -> bool:
    """Overwrite an existing regular file of one link in place, as `cp` does; False (nothing
    touched) when it is anything else or cannot be opened for writing.

    A file written aside and renamed over costs an inode made and one freed per file, which
    is most of an apply's system time on ext4 (and far more without a journal, where every
    new inode is checked against the recently deleted ones). A reader may see the file half
    written, as during a `git checkout`; a crash half-way is completed from the apply's
    journal, which rewrites every path. The room the new bytes need is allocated before the
    first byte changes, so a full disk leaves the file as it was. A file with other links is
    written aside, so that the other names keep their content."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return False
    try:
        # O_NONBLOCK: should the path have become a FIFO meanwhile, never wait for a reader
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_nlink != 1:
            return False
        data = content()
        if len(data) > now.st_size:
            try:
                os.posix_fallocate(fd, 0, len(data))
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                return False  # a filesystem that cannot reserve room first: written aside
        _write_all(fd, data)
        if len(data) < now.st_size:
            os.ftruncate(fd, len(data))
        if stat.S_IMODE(now.st_mode) != perm:
            os.fchmod(fd, perm)
    finally:
        os.close(fd)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _make_parents(base: str, path: str, present: set[str]) -> list[str]:
    """Create missing parent directories; returns the directories that got them as entries."""
    missing: list[str] = []
    parent = path.rpartition("/")[0]
    while parent not in present and not os.path.isdir(base + parent):
        missing.append(parent)
        parent = parent.rpartition("/")[0]
    present.add(parent)
    for directory in reversed(missing):
        os.mkdir(base + directory)
        present.add(directory)
    return [d.rpartition("/")[0] for d in missing]


def _workdir(repo: pygit2.Repository) -> Path:
    if repo.workdir is None:
        raise GitsessError(f"{repo.path} has no worktree")
    return Path(repo.workdir)
