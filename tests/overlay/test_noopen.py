"""Files are served without OPEN requests (open answers ENOSYS): the kernel keeps their pages,
WRITEs name their writer, and the daemon keeps worktree files open on its own terms."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from gitsess.overlay import lower_layer
from tests.live_util import eventually
from tests.overlay.conftest import Mounted, make_worktree
from tests.util import git

pytestmark = pytest.mark.fuse

FILES = 40
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    wt = make_worktree(tmp_path / "wt")
    (wt / "many").mkdir()
    for i in range(FILES):
        (wt / "many" / f"f{i:02d}").write_bytes(bytes([i]) * 5000)
    return wt


def _read_while_stopped(m: Mounted, path: Path) -> bytes | None:
    """What a process read from `path` while the daemon was stopped (only the kernel's caches
    could answer), None if it could not."""
    os.stat(path.parent)  # the walk checks each directory's permissions: have them held
    os.stat(m.mnt)
    # os.open and os.read: open() would stat the file (its atime is stale once read, as on
    # any FUSE filesystem) and ask whether it is a tty.
    code = "import os, sys; os.write(1, os.read(os.open(sys.argv[1], os.O_RDONLY), 1 << 20))"
    return m.run_while_stopped(code, str(path), wait=5)


def test_a_file_read_before_is_read_again_with_no_request(mounted: Mounted) -> None:
    mounted.wait_watched()  # which has the kernel drop what it held before
    path = mounted.mnt / "many" / "f03"
    assert path.read_bytes() == bytes([3]) * 5000
    assert _read_while_stopped(mounted, path) == bytes([3]) * 5000


def test_a_file_appended_to_after_a_read_is_read_again_with_no_request(mounted: Mounted) -> None:
    # A WRITE leaves the kernel's pages as written and its mtime as it was: with
    # FUSE_AUTO_INVAL_DATA the next reply with the new mtime dropped every page (a READ of
    # the whole file, then a GETATTR for its atime, for each file a commit reads).
    mounted.wait_watched()
    path = mounted.mnt / "many" / "f04"
    assert path.read_bytes() == bytes([4]) * 5000
    with open(path, "ab") as f:
        f.write(b"appended")
    assert os.stat(path).st_size == 5008  # (the kernel learns the new mtime)
    assert _read_while_stopped(mounted, path) == bytes([4]) * 5000 + b"appended"


@pytest.mark.parametrize("how", ["renamed over", "rewritten in place"])
def test_a_git_file_changed_outside_to_the_same_size_reads_anew(mounted: Mounted, how: str) -> None:
    # Nothing watches `.git`, and no page is dropped on a new mtime alone: the changed file
    # must be another node for the kernel, one it holds no page of.
    seen, real = mounted.mnt / ".git" / "refs" / "heads" / "main", mounted.lower / ".git"
    ref = real / "refs" / "heads" / "main"
    old = ref.read_bytes()
    assert seen.read_bytes() == old
    new = git(mounted.lower, "commit-tree", "HEAD^{tree}", "-m", "next").encode() + b"\n"
    assert len(new) == len(old) != 0
    if how == "renamed over":
        (real / "main.lock").write_bytes(new)
        os.rename(real / "main.lock", ref)
    else:
        with open(ref, "r+b") as f:
            f.write(new)
    assert seen.read_bytes() == new
    assert seen.read_bytes() == new  # (and the next reader too)


def test_a_file_changed_in_the_worktree_reads_anew(mounted: Mounted) -> None:
    # The daemon keeps worktree files open between reads: a replaced one must not be read
    # through the old descriptor, nor from the kernel's old pages.
    seen, real = mounted.mnt / "many" / "f04", mounted.lower / "many" / "f04"
    assert seen.read_bytes() == bytes([4]) * 5000
    (real.parent / "new").write_bytes(b"replaced\n")
    os.rename(real.parent / "new", real)
    assert eventually(lambda: seen.read_bytes() == b"replaced\n")


def _events(m: Mounted, op: str) -> list[tuple[str, int, int]]:
    m.sync()
    db = apsw.Connection(str(m.spec.session_dir / "delta.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = db.execute("SELECT path, bytes, pid FROM events WHERE op = ? ORDER BY id", (op,))
        return [(p, b, pid) for p, b, pid in rows]
    finally:
        db.close()


def test_writes_to_an_existing_file_name_their_writer(mounted: Mounted) -> None:
    # No CREATE and no OPEN: the WRITEs alone say who wrote.
    code = (
        "import os, sys\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY)\n"
        "for _ in range(3): os.write(fd, b'xy')\n"
        "print(os.getpid())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(mounted.mnt / "README")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert _events(mounted, "write") == [("README", 6, int(done.stdout))]
    assert (mounted.mnt / "README").read_bytes() == b"xyxyxy\n"
    assert (mounted.lower / "README").read_text() == "readme\n"


def test_o_trunc_of_an_existing_file_truncates(mounted: Mounted) -> None:
    with open(mounted.mnt / "src" / "main.py", "w") as f:
        f.write("x")
    assert (mounted.mnt / "src" / "main.py").read_text() == "x"
    assert [p for p, _, _ in _events(mounted, "truncate")] == ["src/main.py"]


def test_a_git_file_written_in_place_changes_the_sessions_copy(mounted: Mounted) -> None:
    seen, real = mounted.mnt / ".git" / "description", mounted.lower / ".git" / "description"
    before = real.read_bytes()
    with open(seen, "r+b") as f:
        f.write(b"HELLO")
    assert real.read_bytes() == before
    assert seen.read_bytes() == b"HELLO" + before[5:]


def test_the_object_store_is_the_sessions_own(mounted: Mounted) -> None:
    """The view's object store is a symlink to the session's store on disk, which borrows the
    real one: objects written there are the session's only, the real ones read through it."""
    objects = mounted.mnt / ".git" / "objects"
    real = mounted.lower / ".git" / "objects"
    store = Path(os.readlink(objects))
    assert store.is_dir() and not store.is_relative_to(mounted.mnt)
    (mounted.mnt / "new.txt").write_text("new object\n")
    blob = git(mounted.mnt, "hash-object", "-w", "new.txt").strip()
    assert (store / blob[:2] / blob[2:]).is_file()
    assert not (real / blob[:2] / blob[2:]).exists()
    head = git(mounted.mnt, "rev-parse", "HEAD").strip()
    assert git(mounted.mnt, "cat-file", "-t", head).strip() == "commit"
    assert not (store / head[:2] / head[2:]).exists()  # read from the real store


def test_worktree_files_held_open_stay_few(mounted: Mounted, tmp_path: Path) -> None:
    many = mounted.lower / "wide"
    many.mkdir()
    for i in range(lower_layer.LOWER_FDS_OPEN + 100):
        (many / f"w{i}").write_text(f"{i}\n")
    for i in range(lower_layer.LOWER_FDS_OPEN + 100):
        assert (mounted.mnt / "wide" / f"w{i}").read_text() == f"{i}\n"
    fds = Path(f"/proc/{mounted.daemon_pid()}/fd")
    held = []
    for fd in fds.iterdir():
        with contextlib.suppress(FileNotFoundError):  # the listing threads' come and go
            held.append(os.readlink(fd))
    assert 0 < sum(str(many) in link for link in held) <= lower_layer.LOWER_FDS_OPEN


def _resident(path: Path) -> bool:
    """Whether the first page of `path` is in the page cache (mincore(2))."""
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = LIBC.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = ctypes.create_string_buffer(1)
            assert LIBC.mincore(ctypes.c_void_p(addr), mmap.PAGESIZE, vec) == 0
            return bool(vec.raw[0] & 1)
        finally:
            LIBC.munmap(ctypes.c_void_p(addr), mmap.PAGESIZE)
    finally:
        os.close(fd)


def _evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_the_files_of_a_directory_read_one_after_another_are_read_ahead(
    mounted: Mounted,
) -> None:
    real = [mounted.lower / "many" / f"f{i:02d}" for i in range(FILES)]
    for p in real:
        _evict(p)
    assert not any(_resident(p) for p in real[2:])
    (mounted.mnt / "many" / "f00").read_bytes()
    assert not _resident(real[FILES - 1])  # one file read says nothing of the others
    (mounted.mnt / "many" / "f01").read_bytes()
    assert eventually(lambda: all(_resident(p) for p in real[2:]))


def test_a_branch_made_outside_is_listed_in_a_refs_dir_the_session_owns(mounted: Mounted) -> None:
    # The session's own `refs/heads` merges its listing with the real one, which git changes
    # outside, and its name is kept 300 s. Without FUSE_AUTO_INVAL_DATA the kernel drops the
    # listing it holds once it has a new mtime: the permission check of a path walk asks for the
    # attributes (kept 1 s below `.git`) again.
    heads = mounted.mnt / ".git" / "refs" / "heads"
    (heads / "topic").write_bytes((heads / "main").read_bytes())
    assert sorted(os.listdir(heads)) == ["main", "topic"]
    git(mounted.lower, "branch", "other")
    assert eventually(lambda: "other" in os.listdir(heads), timeout=10)
    assert sorted(os.listdir(heads)) == ["main", "other", "topic"]
