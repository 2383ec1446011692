"""How many files a session really changed: what `ls` and `show` count.

A path the session touched can hold what the worktree holds (a file written back with its
bytes, a directory made and removed): only files whose kind, mode, target or bytes differ
from the worktree's count, and a touched directory counts the files below it that differ.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from gitsess.git.view import Entry, SessionView, kind_of

_CHUNK = 1 << 20


def changed_files(view: SessionView, lower: Path, hidden: tuple[str, ...] = ()) -> int:
    skip = {".git", *hidden}
    return sum(1 for path in view.touched_paths() for _ in _differing(view, lower, path, skip))


def _real(lower: Path, path: str) -> Entry | None:
    try:
        st = os.lstat(lower / path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Entry(kind_of(st.st_mode), st.st_mode, st.st_size, st.st_mtime_ns)


def _differing(view: SessionView, lower: Path, path: str, skip: set[str]) -> Iterator[str]:
    if path in skip:
        return
    mine, real = view.entry(path), _real(lower, path)
    mine_dir = mine is not None and mine.kind == "dir"
    real_dir = real is not None and real.kind == "dir"
    if mine_dir or real_dir:
        names = set(view.listdir(path)) if mine_dir else set()
        if real_dir:
            names.update(os.listdir(lower / path))
        for name in sorted(names):
            yield from _differing(view, lower, f"{path}/{name}" if path else name, skip)
        if mine_dir != real_dir and (mine is not None and real is not None):
            yield path  # a file replaced by a directory or the other way round
        return
    if mine is None or real is None:
        if mine is not None or real is not None:
            yield path
        return
    if mine.kind != real.kind or stat.S_IMODE(mine.mode) != stat.S_IMODE(real.mode):
        yield path
    elif mine.kind == "symlink":
        if view.readlink(path) != os.readlink(lower / path):
            yield path
    elif mine.kind == "file" and (mine.size != real.size or not _same_bytes(view, lower, path)):
        yield path


def _same_bytes(view: SessionView, lower: Path, path: str) -> bool:
    with view.open(path) as mine, open(lower / path, "rb") as real:
        while True:
            a, b = mine.read(_CHUNK), real.read(_CHUNK)
            if a != b:
                return False
            if not a:
                return True
