"""The sweep of an index against its worktree in C (`git/_indexsweep.c`) answers exactly as the
Python it replaced (`python_dirty`, `python_walk` below: `index_view`'s sweep and `indexfile`'s
walk of the entries as they were), on real indexes of every version and worktrees changed every
way git notices; its walk (where the entries end, their paths) reads as the Python one did."""

from __future__ import annotations

import os
import random
import stat
import struct
import time
from pathlib import Path

import pytest

from gitsess.git import _indexsweep, indexfile
from tests.util import git, into_the_past, make_repo

PAST = time.time() - 1000
FILES = {f"d{i % 4}/sub{i % 2}/f{i}.txt": f"{i}\n" for i in range(40)} | {"top.txt": "t\n"}
_ENTRY = struct.Struct(">10I20xH")  # the fixed fields, the object id skipped, the flags
_STAGE = 0x3000
MODE, FLAGS = 6, 10
# An entry: its path, and its fixed fields as `_ENTRY` reads them: ctime s/ns, mtime s/ns,
# dev, ino, mode, uid, gid, size, flags.
Entry = tuple[bytes, tuple[int, ...]]


def is_gitlink(entry: Entry) -> bool:
    return entry[1][MODE] & 0o170000 == 0o160000


def python_walk(data: bytes) -> tuple[list[Entry], int] | None:
    """The entries of an index, and where they end: `indexfile.parse`'s walk before C did it."""
    version, count = struct.unpack_from(">II", data, 4)
    entries: list[Entry] = []
    off, last = 12, b""
    try:
        for _ in range(count):
            fields = _ENTRY.unpack_from(data, off)
            flags = fields[FLAGS]
            at = off + _ENTRY.size + (2 if flags & 0x4000 else 0)
            if version == 4:
                strip, at = indexfile._varint(data, at)
                end = data.index(b"\0", at)
                path = last[: len(last) - strip] + data[at:end]
                off = end + 1
                last = path
            else:
                size = flags & 0xFFF
                end = at + size if size < 0xFFF else data.index(b"\0", at)
                path = data[at:end]
                off += (end - off + 8) & ~7
            entries.append((path, fields))
    except (struct.error, ValueError, IndexError):
        return None
    return entries, off


def _git_mode(mode: int) -> int:
    if stat.S_ISLNK(mode):
        return 0o120000
    if stat.S_ISREG(mode):
        return 0o100755 if mode & 0o100 else 0o100644
    return -1


def _clean(worktree: bytes, entry: Entry, racy_from: int) -> bool:
    try:
        st = os.lstat(worktree + b"/" + entry[0])
    except OSError:
        return False
    c_s, c_ns, m_s, m_ns, _dev, ino, mode, uid, gid, size, flags = entry[1]
    if flags & _STAGE or m_s >= racy_from:
        return False
    return (
        st.st_mtime_ns == m_s * 1_000_000_000 + m_ns
        and st.st_ctime_ns == c_s * 1_000_000_000 + c_ns
        and st.st_ino & 0xFFFFFFFF == ino
        and st.st_uid == uid
        and st.st_gid == gid
        and st.st_size & 0xFFFFFFFF == size
        and _git_mode(st.st_mode) == mode
    )


def _same_dir(worktree: bytes, rel: bytes, seen: tuple[int, ...], racy_from: int) -> bool:
    try:
        st = os.lstat(worktree + b"/" + rel)
    except OSError:
        return False
    c_s, c_ns, m_s, m_ns, _dev, ino, uid, gid, size = seen
    return (
        m_s < racy_from
        and st.st_mtime_ns == m_s * 1_000_000_000 + m_ns
        and st.st_ctime_ns == c_s * 1_000_000_000 + c_ns
        and st.st_ino & 0xFFFFFFFF == ino
        and st.st_uid == uid
        and st.st_gid == gid
        and st.st_size & 0xFFFFFFFF == size
    )


def python_dirty(data: bytes, worktree: bytes, racy_from: int) -> tuple[set[bytes], set[bytes]]:
    """The entries and the untracked cache's directories (root aside) the Python sweep found
    not to match."""
    index = indexfile.parse(data)
    assert index is not None
    walked = python_walk(data)
    assert walked is not None
    entries = {e[0] for e in walked[0] if not is_gitlink(e)}
    entries -= {e[0] for e in walked[0] if _clean(worktree, e, racy_from)}
    cache = indexfile.untracked(index)
    dirs = {
        p[:-1]
        for p, seen in (cache.dirs if cache is not None else [])
        if p and seen is not None and not _same_dir(worktree, p[:-1], seen, racy_from)
    }
    return entries, dirs


def c_dirty(
    data: bytes, worktree: bytes, racy_from: int, threads: int = 4
) -> tuple[set[bytes], set[bytes]]:
    index = indexfile.parse(data)
    assert index is not None
    cache = indexfile.untracked(index)
    dirs = [(p[:-1], s) for p, s in (cache.dirs if cache else []) if p and s is not None]
    swept = _indexsweep.sweep(data, worktree, racy_from, dirs, threads)
    assert swept is not None
    paths, stale = swept
    return set(paths), {dirs[i][0] for i in stale}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose files and directories are older than its index, with a filled
    untracked cache, a symlink, an executable, a gitlink, an intent-to-add entry (extended
    flags), a path longer than the 12 bits of an entry's name length, and merge stages."""
    repo = make_repo(tmp_path / "r", FILES, executable=["top.txt"])
    os.symlink("top.txt", repo / "link")
    (repo / "d1" / "untracked.txt").write_text("u\n")
    (repo / "later.txt").write_text("l\n")
    git(repo, "add", "link")
    git(repo, "add", "-N", "later.txt")
    blob = git(repo, "hash-object", "-w", "top.txt")
    commit = git(repo, "rev-parse", "HEAD")
    long = "/".join(["x" * 200] * 21)  # 4,220 bytes: its name length is stored as 0xFFF
    info = f"160000 {commit} 0\tsub\n100644 {blob} 0\t{long}\n"
    info += "".join(f"100644 {blob} {stage}\tconflicted.txt\n" for stage in (1, 2, 3))
    git(repo, "update-index", "--add", "--index-info", input=info.encode())
    into_the_past(repo, PAST)
    git(repo, "update-index", "-q", "--refresh", check=False)
    for _ in range(2):  # the first status makes the untracked cache, the second fills it
        git(repo, "-c", "core.untrackedCache=true", "status", "--porcelain", check=False)
    return repo


def changed_every_way(repo: Path) -> None:
    (repo / "d0/sub0/f0.txt").write_text("longer than before\n")  # size, mtime
    os.utime(repo / "d0/sub0/f4.txt")  # mtime alone
    os.chmod(repo / "d1/sub1/f1.txt", 0o755)  # mode (and ctime)
    (repo / "d2/sub0/f2.txt").unlink()  # gone
    (repo / "d3/sub1/f3.txt").unlink()
    (repo / "d3/sub1/f3.txt").mkdir()  # a directory now
    (repo / "d1/sub1/f5.txt").unlink()
    os.symlink("f9.txt", repo / "d1/sub1/f5.txt")  # a symlink now
    (repo / "d2/new.txt").write_text("n\n")  # a directory of the cache changed
    (repo / "d0/sub0/f8.txt").unlink()
    (repo / "d0/sub0/f8.txt").write_text("8\n")  # same size, another inode


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_the_c_sweep_answers_as_the_python_one(repo: Path, version: str) -> None:
    git(repo, "update-index", "--index-version", version)
    data = (repo / ".git" / "index").read_bytes()
    worktree = os.fsencode(repo)
    mtime = os.stat(repo / ".git" / "index").st_mtime_ns // 1_000_000_000
    racy_lines = (0, int(PAST), int(PAST) + 1, mtime, 2**40)
    for racy_from in racy_lines:
        assert c_dirty(data, worktree, racy_from) == python_dirty(data, worktree, racy_from)
    clean = c_dirty(data, worktree, mtime)
    assert b"top.txt" not in clean[0]  # (the sweep found something clean: not all dirty)
    assert {b"conflicted.txt", b"later.txt"} <= clean[0] and b"sub" not in clean[0]
    changed_every_way(repo)
    for racy_from in racy_lines:
        for threads in (1, 3, 64):
            got = c_dirty(data, worktree, racy_from, threads)
            assert got == python_dirty(data, worktree, racy_from)
    dirty, dirs = c_dirty(data, worktree, mtime)
    assert {b"d0/sub0/f0.txt", b"d0/sub0/f4.txt", b"d1/sub1/f1.txt", b"d2/sub0/f2.txt"} <= dirty
    assert {b"d3/sub1/f3.txt", b"d1/sub1/f5.txt", b"d0/sub0/f8.txt"} <= dirty
    assert b"top.txt" not in dirty and b"d2" in dirs and b"d1" not in dirs


def test_no_worktree_means_every_entry_dirty(repo: Path, tmp_path: Path) -> None:
    data = (repo / ".git" / "index").read_bytes()
    gone = os.fsencode(tmp_path / "gone")
    assert c_dirty(data, gone, 2**40) == python_dirty(data, gone, 2**40)
    assert b"top.txt" in c_dirty(data, gone, 2**40)[0]


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_the_entries_end_where_the_python_walk_ends(repo: Path, version: str) -> None:
    git(repo, "update-index", "--index-version", version)
    data = (repo / ".git" / "index").read_bytes()
    walked = python_walk(data)
    assert walked is not None
    assert _indexsweep.entries_end(data) == walked[1]
    assert _indexsweep.paths(data) == [e[0] for e in walked[0] if not is_gitlink(e)]
    # Damaged: never read past the data; where C reads the entries, Python reads the same.
    rng = random.Random(41)
    for _ in range(400):
        bad = bytearray(data[: rng.randrange(len(data))] if rng.random() < 0.3 else data)
        for _ in range(rng.randrange(1, 4)):
            if bad:
                bad[rng.randrange(min(len(bad), walked[1]))] = rng.randrange(256)
        end = _indexsweep.entries_end(bytes(bad))
        if end is not None:
            again = python_walk(bytes(bad))
            assert again is not None and again[1] == end
            assert _indexsweep.paths(bytes(bad)) == [e[0] for e in again[0] if not is_gitlink(e)]
        else:
            assert _indexsweep.paths(bytes(bad)) is None
        _indexsweep.sweep(bytes(bad), os.fsencode(repo), 0, [], 2)  # (no crash)
