"""The session's change set as git shows a diff: patch text, --stat, --name-status, JSON.

The two sides are turned into two small trees (only the changed paths) in a scratch object
database that reads the real repository's objects but writes to a temporary directory, and
libgit2 diffs them. So diffing never writes into the repository, and the output (hunks, rename
detection, binary patches) is git's own format, which `git apply` accepts.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import BinaryIO

import pygit2
from pygit2.enums import DeltaStatus, DiffFind, DiffOption, FileMode

from gitsess import progress
from gitsess.git.binary_patch import write_literal
from gitsess.git.blobid import CHUNK
from gitsess.git.changes import Change, ChangeSet, Side
from gitsess.git.diffstat import StatFile, format_stat
from gitsess.git.quoting import quote_path
from gitsess.git.scratch import BIG_FILE, BigFile, scratch_repo
from gitsess.git.view import SessionView

_STATUS = {
    DeltaStatus.ADDED: "A",
    DeltaStatus.DELETED: "D",
    DeltaStatus.MODIFIED: "M",
    DeltaStatus.RENAMED: "R",
    DeltaStatus.COPIED: "C",
    DeltaStatus.TYPECHANGE: "T",
}


@dataclass(frozen=True)
class FileDiff:
    """One file of the diff. Modes are git's (0o100644, 0o100755, 0o120000); `patch` is the
    exact bytes of this file's part of the patch (content need not be UTF-8)."""

    status: str  # A, D, M, R (rename), T (type change)
    old_path: str | None
    new_path: str | None
    old_mode: int | None
    new_mode: int | None
    old_oid: str | None
    new_oid: str | None
    similarity: int | None
    binary: bool
    additions: int
    deletions: int
    patch: bytes
    old_size: int = 0  # bytes (the stat's `Bin OLD -> NEW bytes`)
    new_size: int = 0
    # For a file too big to hold (`BIG_FILE`) in a binary patch: writes its content after
    # `patch`, reading the file as it goes.
    tail: Callable[[BinaryIO], None] | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> str:
        path = self.new_path or self.old_path
        assert path is not None
        return path

    def to_json(self, *, with_patch: bool = True) -> dict[str, object]:
        data: dict[str, object] = {
            "status": self.status,
            "path": self.path,
            "old_path": self.old_path,
            "new_path": self.new_path,
            "old_mode": _octal(self.old_mode),
            "new_mode": _octal(self.new_mode),
            "old_oid": self.old_oid,
            "new_oid": self.new_oid,
            "similarity": self.similarity,
            "binary": self.binary,
            "additions": self.additions,
            "deletions": self.deletions,
        }
        if with_patch:
            data["patch"] = self.patch.decode("utf-8", "replace")
        return data


def _octal(mode: int | None) -> str | None:
    return None if mode is None else f"{mode:06o}"


@dataclass(frozen=True)
class DiffResult:
    files: tuple[FileDiff, ...]
    # formats the `git diff --stat` text; called once, on first use of `stat`
    stat_of: Callable[[], str] = field(default=str, repr=False, compare=False)

    @cached_property
    def stat(self) -> str:
        """`git diff --stat` text, as git lays it out (`diffstat.py`), made when asked for."""
        return self.stat_of()

    def patch(self) -> bytes:
        out = io.BytesIO()
        self.write_patch(out)
        return out.getvalue()

    def write_patch(self, out: BinaryIO) -> None:
        for f in self.files:
            out.write(f.patch)
            if f.tail is not None:
                f.tail(out)

    def name_only(self) -> list[str]:
        """Lines as `git diff --name-only` prints them (names quoted as git quotes them)."""
        return [quote_path(path) for (path,) in self.name_records(with_status=False)]

    def name_status(self) -> list[str]:
        """Lines as `git diff --name-status` prints them (tab-separated, names quoted)."""
        return [
            "\t".join([status, *map(quote_path, paths)])
            for status, *paths in self.name_records(with_status=True)
        ]

    def name_records(self, *, with_status: bool) -> list[list[str]]:
        """Each file's fields for `--name-status` (or `--name-only`), names as they are: `-z`
        prints them so, each ended by a NUL."""
        records = []
        for f in self.files:
            if not with_status:
                records.append([f.path])
            elif f.status == "R":
                records.append([f"R{f.similarity or 0:03d}", f.old_path or "", f.new_path or ""])
            else:
                records.append([f.status, f.path])
        return records

    @property
    def additions(self) -> int:
        return sum(f.additions for f in self.files)

    @property
    def deletions(self) -> int:
        return sum(f.deletions for f in self.files)

    def to_json(self, *, with_patch: bool = True) -> dict[str, object]:
        return {
            "files": [f.to_json(with_patch=with_patch) for f in self.files],
            "summary": {
                "changed_files": len(self.files),
                "additions": self.additions,
                "deletions": self.deletions,
            },
        }


def diff_changes(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet | Sequence[Change],
    *,
    binary: bool = False,
    find_renames: bool = True,
    rename_threshold: int = 50,
    context_lines: int = 3,
    stat_width: int = 80,
    scratch: pygit2.Repository | None = None,
    merged: Mapping[str, tuple[str, int] | None] | None = None,
) -> DiffResult:
    """Diff the real worktree (old side) against the view (new side) for `changes`.

    `binary` gives git's `--binary` form (binary files as base85 literal/delta patches with full
    index lines) instead of "Binary files ... differ". `scratch` is the scratch repository
    `changes` was computed with (its `store`), if any; else one is made. `merged` gives the
    new side of paths where the session's change, merged onto commits the worktree got since
    the session's base, is not the view's (blobs in `scratch`; see `apply.merge_onto_head`).
    """
    selected = changes.changes if isinstance(changes, ChangeSet) else tuple(changes)
    git_changes = [c for c in selected if c.git_visible]
    if not git_changes:
        return DiffResult(())
    root = Path(repo.workdir or ".")
    big = _BigFiles()
    with scratch_repo(repo) if scratch is None else nullcontext(scratch) as scratch:
        old_tree = _side_tree(scratch, git_changes, lambda c: _real_blob(scratch, root, c, big))
        over = merged or {}

        def new_blob(c: Change) -> tuple[str, int] | None:
            return over[c.path] if c.path in over else _view_blob(scratch, view, c, big)

        new_tree = _side_tree(scratch, git_changes, new_blob)
        flags = DiffOption.SHOW_BINARY if binary else DiffOption.NORMAL
        diff = old_tree.diff_to_tree(new_tree, flags=flags, context_lines=context_lines)
        if find_renames:
            diff.find_similar(DiffFind.FIND_RENAMES, rename_threshold=rename_threshold)
        deltas = [_file_diff(p) for p in diff if p is not None]
        files = _merge_typechanges([big.restore(f, binary) for f in deltas])
    if not files:
        return DiffResult(())
    return DiffResult(
        tuple(files),
        lambda: format_stat([_stat_file(f) for f in files], stat_width),
    )


class _BigFiles:
    """Files past `BIG_FILE` in a diff. libgit2 diffs a small binary stand-in for each (named
    after the file's id, so that equal files still pair up as renames); the stand-ins' ids,
    sizes and content are then replaced by the files' own in the patch and the stat."""

    def __init__(self) -> None:
        self.by_stand_in: dict[str, BigFile] = {}

    def stand_in(self, scratch: pygit2.Repository, big: BigFile) -> str:
        oid = str(scratch.create_blob(_STAND_IN + big.oid.encode()))
        self.by_stand_in[oid] = big
        return oid

    def restore(self, f: FileDiff, binary: bool) -> FileDiff:
        old = self.by_stand_in.get(f.old_oid or "")
        new = self.by_stand_in.get(f.new_oid or "")
        if old is None and new is None:
            return f
        lines = []
        for line in f.patch.splitlines(keepends=True):
            if line.startswith((b"Binary files ", b"GIT binary patch")):
                break
            if line.startswith(b"index "):
                line = self._index_line(line)
            lines.append(line)
        header = b"".join(lines)
        tail = None
        if binary and header.startswith(b"diff ") and b"\nindex " in header:
            tail = partial(_write_whole, new)
        elif header.startswith(b"diff ") and b"\nindex " in header:
            a = b"/dev/null" if f.status == "A" else b"a/" + os.fsencode(f.old_path or "")
            b = b"/dev/null" if f.status == "D" else b"b/" + os.fsencode(f.new_path or "")
            header += b"Binary files %s and %s differ\n" % (a, b)
        return replace(
            f,
            old_oid=old.oid if old is not None else f.old_oid,
            new_oid=new.oid if new is not None else f.new_oid,
            binary=True,
            additions=0,
            deletions=0,
            patch=header,
            old_size=old.size if old is not None else f.old_size,
            new_size=new.size if new is not None else f.new_size,
            tail=tail,
        )

    def _index_line(self, line: bytes) -> bytes:
        for stand_in, big in self.by_stand_in.items():
            for length in (40, 7):
                line = line.replace(stand_in[:length].encode(), big.oid[:length].encode())
        return line


_STAND_IN = b"\0gitsess: a file too big to diff, "


def _write_whole(big: BigFile | None, out: BinaryIO) -> None:
    """The binary patch's forward hunk: the new content (none for a removal)."""
    if big is None:
        write_literal(out, 0, ())
        return
    with big.open() as f, progress.reading(f, f"patching {big.path}", big.size) as read:
        write_literal(out, big.size, iter(partial(read.read, CHUNK), b""))


def _side_tree(
    scratch: pygit2.Repository,
    changes: Sequence[Change],
    blob_for: Callable[[Change], tuple[str, int] | None],
) -> pygit2.Tree:
    """A tree holding, for each change, this side's blob (where it has one).

    Built directory by directory with tree builders: an index takes each entry through cffi,
    about twice the cost. But a tree builder takes UTF-8 names only, and an index any name's
    bytes (os.fsencode): a name that is not UTF-8 takes the index."""
    if not all(_utf8(c.path) for c in changes):
        index = pygit2.Index()
        for change in changes:
            entry = blob_for(change)
            if entry is not None:
                index.add(pygit2.IndexEntry(change.path, pygit2.Oid(hex=entry[0]),
                                            FileMode(entry[1])))  # fmt: skip
        return scratch[index.write_tree(scratch)].peel(pygit2.Tree)
    root: _Dir = {}
    for change in changes:
        entry = blob_for(change)
        if entry is not None:
            *dirs, name = change.path.split("/")
            at = root
            for d in dirs:
                sub = at.setdefault(d, {})
                assert isinstance(sub, dict)  # one side holds no file where it has a directory
                at = sub
            at[name] = entry
    tree = scratch.get(_write_dir(scratch, root))
    assert isinstance(tree, pygit2.Tree)
    return tree


def _utf8(path: str) -> bool:
    try:
        path.encode()
    except UnicodeEncodeError:
        return False
    return True


# a directory of a side's tree: name -> a directory, or (blob id, mode)
_Dir = dict[str, "_Dir | tuple[str, int]"]


def _write_dir(scratch: pygit2.Repository, d: _Dir) -> pygit2.Oid:
    builder = scratch.TreeBuilder()
    for name, item in d.items():
        if isinstance(item, dict):
            builder.insert(name, _write_dir(scratch, item), FileMode.TREE)
        else:
            oid, mode = item
            builder.insert(name, pygit2.Oid(hex=oid), FileMode(mode))
    return builder.write()


def _real_blob(
    scratch: pygit2.Repository, root: Path, change: Change, big: _BigFiles
) -> tuple[str, int] | None:
    """The real worktree's blob for `change.old`, stored in `scratch` unless already known."""
    entry = change.git_old
    if entry is None or change.old is None:
        return None
    oid, mode = entry
    if change.old.kind == "file" and change.old.size > BIG_FILE:
        full = root / change.path

        def opener() -> BinaryIO:
            return open(full, "rb")

        return big.stand_in(scratch, BigFile(change.path, oid, change.old.size, opener)), mode
    if oid not in scratch.odb:
        oid = str(scratch.create_blob(read_real(root, change.path, change.old)))
    return oid, mode


def _view_blob(
    scratch: pygit2.Repository, view: SessionView, change: Change, big: _BigFiles
) -> tuple[str, int] | None:
    entry = change.git_new
    if entry is None or change.new is None:
        return None
    oid, mode = entry
    if change.new.kind == "file" and change.new.size > BIG_FILE:
        reader = partial(view.open, change.path)
        return big.stand_in(scratch, BigFile(change.path, oid, change.new.size, reader)), mode
    if oid not in scratch.odb:
        oid = str(scratch.create_blob(read_view(view, change.path, change.new)))
    return oid, mode


def read_real(root: Path, path: str, state: Side) -> bytes:
    """Content of a real-tree file, or the target of a real-tree symlink, as git stores it."""
    full = root / path
    if state.kind == "symlink":
        return os.fsencode(full.readlink())
    return full.read_bytes()


def read_view(view: SessionView, path: str, state: Side) -> bytes:
    if state.kind == "symlink":
        return os.fsencode(view.readlink(path))
    return view.read(path)


def _file_diff(patch: pygit2.Patch) -> FileDiff:
    delta = patch.delta
    status = _STATUS.get(delta.status, "M")
    old = delta.old_file
    new = delta.new_file
    _, additions, deletions = patch.line_stats
    data = patch.data
    if status in ("R", "M") and old.id == new.id:
        data = _headers_only(data)
    return FileDiff(
        status=status,
        old_path=None if status == "A" else old.path,
        new_path=None if status == "D" else new.path,
        old_mode=None if status == "A" else int(old.mode),
        new_mode=None if status == "D" else int(new.mode),
        old_oid=None if status == "A" else str(old.id),
        new_oid=None if status == "D" else str(new.id),
        similarity=delta.similarity if status == "R" else None,
        binary=bool(delta.is_binary),
        additions=additions,
        deletions=deletions,
        patch=data,
        old_size=0 if status == "A" else old.size,
        new_size=0 if status == "D" else new.size,
    )


def _headers_only(data: bytes) -> bytes:
    """Headers only, as git prints a rename or mode change of unchanged content.

    libgit2 adds "Binary files ... differ" for a binary file, which `git apply` refuses as a
    binary patch without full index.
    """
    keep = []
    for line in data.splitlines(keepends=True):
        if line.startswith((b"index ", b"Binary files ", b"GIT binary patch", b"--- ")):
            break
        keep.append(line)
    return b"".join(keep)


def _merge_typechanges(files: list[FileDiff]) -> list[FileDiff]:
    """A deletion and an addition of the same path (file <-> symlink) is one type change, as in
    `git diff --name-status`. Its patch is the deletion, then the addition: the order git prints
    and the only one `git apply` takes (libgit2 may list the addition first)."""
    out: list[FileDiff] = []
    for f in files:
        prev = out[-1] if out else None
        if prev is not None and prev.path == f.path and {prev.status, f.status} == {"A", "D"}:
            gone, born = (prev, f) if prev.status == "D" else (f, prev)
            out[-1] = _typechange(gone, born)
        else:
            out.append(f)
    return out


def _typechange(gone: FileDiff, born: FileDiff) -> FileDiff:
    return FileDiff(
        status="T",
        old_path=gone.old_path,
        new_path=born.new_path,
        old_mode=gone.old_mode,
        new_mode=born.new_mode,
        old_oid=gone.old_oid,
        new_oid=born.new_oid,
        similarity=None,
        binary=gone.binary or born.binary,
        additions=born.additions,
        deletions=gone.deletions,
        patch=gone.patch + born.patch,
        old_size=gone.old_size,
        new_size=born.new_size,
    )


def _stat_file(f: FileDiff) -> StatFile:
    """A file as the stat counts it: a binary file by its sizes (none when its content is
    unchanged: a rename, a mode change), as git counts it."""
    if not f.binary:
        return StatFile(f.old_path, f.new_path, False, f.additions, f.deletions)
    if f.old_oid == f.new_oid:
        return StatFile(f.old_path, f.new_path, True, 0, 0)
    return StatFile(f.old_path, f.new_path, True, f.new_size, f.old_size)
