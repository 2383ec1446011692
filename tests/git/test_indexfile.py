"""git's index file as `indexfile` reads it, and the fsmonitor extension it adds, checked by git."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsess.git import _indexsweep, indexfile
from tests.util import git, make_repo

FILES = {f"d{i % 3}/sub/f{i}.txt": f"{i}\n" for i in range(12)} | {"top.txt": "t\n"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "r", FILES)
    (repo / "d1" / "untracked.txt").write_text("u\n")
    for _ in range(2):  # the first status makes the untracked cache, the second fills it
        git(repo, "-c", "core.untrackedCache=true", "status", "--porcelain")
    return repo


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_entries_read_as_git_lists_them(repo: Path, version: str) -> None:
    git(repo, "update-index", "--index-version", version)
    data = (repo / ".git" / "index").read_bytes()
    index = indexfile.parse(data)
    assert index is not None
    paths = _indexsweep.paths(index.data)
    assert paths is not None
    assert [path.decode() for path in paths] == git(repo, "ls-files").split()
    # (their stat data: tests/git/test_indexsweep.py)


def test_the_untracked_cache_holds_every_directory(repo: Path) -> None:
    data = (repo / ".git" / "index").read_bytes()
    index = indexfile.parse(data)
    assert index is not None
    cache = indexfile.untracked(index)
    assert cache is not None
    assert cache.ident.startswith(b"Location " + os.fsencode(repo))
    dirs = dict(cache.dirs)
    assert {b"", b"d0/", b"d1/", b"d1/sub/"} <= set(dirs)
    seen = dirs[b"d1/"]
    assert seen is not None and seen[5] == os.lstat(repo / "d1").st_ino


def test_git_reads_the_fsmonitor_extension_and_the_moved_untracked_cache(
    repo: Path, tmp_path: Path
) -> None:
    data = (repo / ".git" / "index").read_bytes()
    index = indexfile.parse(data)
    assert index is not None
    cache = indexfile.untracked(index)
    assert cache is not None
    moved = (cache, cache.ident.replace(b"Location ", b"Location /elsewhere"))
    shown = tmp_path / "shown"
    shown.write_bytes(indexfile.with_fsmonitor(index, "a-token", moved))
    env = {**os.environ, "GIT_INDEX_FILE": str(shown)}
    out = git(repo, "-c", "core.fsmonitor=true", "ls-files", "--stage", env=env)
    assert out == git(repo, "ls-files", "--stage")  # git checked the new checksum
    again = indexfile.parse(shown.read_bytes())
    assert again is not None
    assert [sig for sig, _, _ in again.extensions] == [b"TREE", b"UNTR", b"FSMN"]
    cache_again = indexfile.untracked(again)
    assert cache_again is not None and cache_again.ident == moved[1]
    assert cache_again.dirs == cache.dirs
    assert indexfile.fsmonitor_token(again) == "a-token"
    assert indexfile.fsmonitor_token(index) is None  # git wrote none


def test_what_it_cannot_read_is_none() -> None:
    assert indexfile.parse(b"DIRC" + bytes(40)) is None
    assert indexfile.parse(b"not an index at all, not at all") is None
