"""A `SessionView` over a plain directory, for tests: a copy of the worktree that a test edits.

`touched_paths` is computed by walking both trees (a directory present on one side only is
reported alone, standing for its subtree, as the overlay does); `copied_from` is the worktree's
lstat recorded when the copy was made.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from gitsess.git.view import Entry, Kind


def entry_of(path: Path) -> Entry | None:
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    kind: Kind
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    else:
        kind = "other"
    return Entry(kind, st.st_mode, st.st_size, st.st_mtime_ns)


def walk(root: Path) -> dict[str, Entry]:
    """Every path below `root` (not `.git`), with its entry."""
    found: dict[str, Entry] = {}

    def visit(rel: str) -> None:
        with os.scandir(root / rel if rel else root) as entries:
            names = sorted(e.name for e in entries)
        for name in names:
            if name == ".git":
                continue
            child = f"{rel}/{name}" if rel else name
            entry = entry_of(root / child)
            assert entry is not None
            found[child] = entry
            if entry.kind == "dir":
                visit(child)

    visit("")
    return found


def same(a: Path, b: Path, ea: Entry, eb: Entry) -> bool:
    """Whether two paths look the same to the filesystem (times aside)."""
    if ea.kind != eb.kind or stat.S_IMODE(ea.mode) != stat.S_IMODE(eb.mode):
        return False
    if ea.kind == "file":
        return a.read_bytes() == b.read_bytes()
    if ea.kind == "symlink":
        return a.readlink() == b.readlink()
    return True


class DirView:
    def __init__(self, root: Path, worktree: Path) -> None:
        self.root = root
        self.worktree = worktree
        self.snapshot = walk(worktree)

    @classmethod
    def copy_of(cls, worktree: Path, dest: Path) -> DirView:
        shutil.copytree(worktree, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        return cls(dest, worktree)

    def touched_paths(self) -> list[str]:
        mine, real = walk(self.root), walk(self.worktree)
        touched: list[str] = []
        covered: list[str] = []
        for path in sorted(set(mine) | set(real)):
            if any(path.startswith(c + "/") for c in covered):
                continue
            a, b = mine.get(path), real.get(path)
            if a and b and same(self.root / path, self.worktree / path, a, b):
                continue
            touched.append(path)
            one_sided_dir = (a is None or b is None or a.kind != b.kind) and "dir" in (
                a.kind if a else None,
                b.kind if b else None,
            )
            if one_sided_dir:
                covered.append(path)
        return touched

    def entry(self, path: str) -> Entry | None:
        if path.split("/")[0] == ".git":
            return None
        return entry_of(self.root / path)

    def is_dir(self, path: str) -> bool:
        found = self.entry(path)
        return found is not None and found.kind == "dir"

    def read(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    def open(self, path: str) -> BinaryIO:
        return open(self.root / path, "rb")

    def removed_at(self, path: str) -> int | None:
        return None

    def readlink(self, path: str) -> str:
        return str((self.root / path).readlink())

    def listdir(self, path: str) -> list[str]:
        names = sorted(p.name for p in (self.root / path).iterdir())
        return [n for n in names if not (path == "" and n == ".git")]

    def copied_from(self, path: str) -> Entry | None:
        return self.snapshot.get(path)

    def refresh(self, paths: Iterable[str]) -> None:
        """What the sessions layer does after an apply: re-record the real lstat of directories
        the apply changed, for the records that stay."""
        for path in paths:
            entry = entry_of(self.worktree / path) if path else None
            if entry is not None:
                self.snapshot[path] = entry
