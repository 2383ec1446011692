"""The overlay's contracts, one by one, on a real mount."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
import subprocess
from pathlib import Path

import apsw
import pyfuse3
import pytest

from gitsess.overlay import control, daemon, protocol
from gitsess.overlay.content_store import INLINE_MAX
from tests.live_util import eventually
from tests.overlay.conftest import Mounted
from tests.util import git

pytestmark = pytest.mark.fuse


def rows(m: Mounted, sql: str) -> list[tuple[object, ...]]:
    m.sync()
    conn = apsw.Connection(str(m.spec.delta), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def data_files(m: Mounted) -> dict[int, bytes]:
    """The session's data files (contents by inode number), once the daemon committed."""
    m.sync()
    data = m.spec.session_dir / "data"
    return {int(p.name): p.read_bytes() for p in data.iterdir()} if data.exists() else {}


def test_unchanged_files_read_through_without_copy(mounted: Mounted) -> None:
    assert (mounted.mnt / "README").read_text() == "readme\n"
    assert (mounted.mnt / "src" / "pkg" / "mod.py").read_text() == "x = 1\n"
    with open(mounted.mnt / "src" / "main.py", "r+b") as f:  # opened for writing, not written
        assert f.read() == b"print('hi')\n"
    assert data_files(mounted) == {}
    assert rows(mounted, "SELECT count(*) FROM nodes WHERE ino != 1") == [(0,)]


def test_writes_stay_in_the_session(mounted: Mounted) -> None:
    (mounted.mnt / "README").write_text("changed\n")
    (mounted.mnt / "new.txt").write_text("new\n")
    assert (mounted.mnt / "README").read_text() == "changed\n"
    assert (mounted.lower / "README").read_text() == "readme\n"
    assert not (mounted.lower / "new.txt").exists()


def test_metadata_changes_copy_no_data(mounted: Mounted) -> None:
    target = mounted.mnt / "src" / "main.py"
    os.chmod(target, 0o600)
    os.utime(target, ns=(1_000_000_000, 2_000_000_000))
    os.setxattr(target, "user.note", b"hello")
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_mtime_ns == 2_000_000_000
    assert os.getxattr(target, "user.note") == b"hello"
    assert target.read_text() == "print('hi')\n"
    assert data_files(mounted) == {}
    assert rows(mounted, "SELECT data FROM nodes WHERE origin = CAST('src/main.py' AS BLOB)") == [
        (0,)
    ]
    assert stat.S_IMODE(os.stat(mounted.lower / "src" / "main.py").st_mode) == 0o644


def test_first_data_change_copies_into_a_data_file(mounted: Mounted) -> None:
    big = mounted.lower / "big.bin"
    big.write_bytes(os.urandom(1_000_000))
    original = big.read_bytes()
    with open(mounted.mnt / "big.bin", "r+b") as f:
        f.seek(500_000)
        f.write(b"XYZ")
    expected = original[:500_000] + b"XYZ" + original[500_003:]
    assert (mounted.mnt / "big.bin").read_bytes() == expected
    assert big.read_bytes() == original
    assert list(data_files(mounted).values()) == [expected]


def test_o_trunc_copies_nothing(mounted: Mounted) -> None:
    (mounted.lower / "big.bin").write_bytes(os.urandom(600_000))
    with open(mounted.mnt / "big.bin", "wb") as f:
        f.write(b"small")
    assert (mounted.mnt / "big.bin").read_bytes() == b"small"
    assert data_files(mounted) == {}
    assert rows(mounted, "SELECT bytes FROM inline_data") == [(b"small",)]


def test_small_files_live_in_delta_db_until_they_grow(mounted: Mounted) -> None:
    path = mounted.mnt / "grows.txt"
    path.write_bytes(b"a" * 100)
    (mounted.mnt / "README").write_text("edited\n")  # a small lower file's copy-up
    assert data_files(mounted) == {}
    assert sorted(rows(mounted, "SELECT bytes FROM inline_data")) == [(b"a" * 100,), (b"edited\n",)]
    os.truncate(path, 300)  # grown by truncate: the rest reads as zeros
    assert path.read_bytes() == b"a" * 100 + bytes(200)
    with open(path, "ab") as f:
        f.write(b"b" * INLINE_MAX)
    expected = b"a" * 100 + bytes(200) + b"b" * INLINE_MAX
    assert path.read_bytes() == expected
    assert list(data_files(mounted).values()) == [expected]
    assert rows(mounted, "SELECT bytes FROM inline_data") == [(b"edited\n",)]


def test_rm_rf_of_a_lower_tree_is_one_whiteout(mounted: Mounted) -> None:
    tree = mounted.lower / "many"
    for d in range(20):
        (tree / f"d{d}").mkdir(parents=True)
        for i in range(50):
            (tree / f"d{d}" / f"f{i}").write_text(str(i))
    subprocess.run(["rm", "-rf", str(mounted.mnt / "many")], check=True)
    assert not (mounted.mnt / "many").exists()
    assert rows(mounted, "SELECT name, ino FROM dentries") == [(b"many", 0)]
    assert rows(mounted, "SELECT count(*) FROM nodes") == [(1,)]
    mounted.remount()
    assert not (mounted.mnt / "many").exists()
    assert (tree / "d3" / "f7").read_text() == "7"


def test_renamed_lower_directory_keeps_its_children(mounted: Mounted) -> None:
    os.rename(mounted.mnt / "src", mounted.mnt / "lib")
    assert (mounted.mnt / "lib" / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert sorted(os.listdir(mounted.mnt / "lib")) == ["main.py", "pkg"]
    assert not (mounted.mnt / "src").exists()
    (mounted.lower / "src" / "pkg" / "later.py").write_text("later\n")
    assert (mounted.mnt / "lib" / "pkg" / "later.py").read_text() == "later\n"
    mounted.remount()
    assert (mounted.mnt / "lib" / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert not (mounted.mnt / "src").exists()


def test_inode_numbers_are_stable_across_remounts(mounted: Mounted) -> None:
    (mounted.mnt / "created").write_text("c")
    (mounted.mnt / "README").write_text("changed")
    os.rename(mounted.mnt / "src", mounted.mnt / "moved")
    paths = ["created", "README", "moved", "moved/pkg/mod.py", "bin/tool", "link"]
    before = {p: os.lstat(mounted.mnt / p).st_ino for p in paths}
    mounted.remount()
    after = {p: os.lstat(mounted.mnt / p).st_ino for p in paths}
    assert before == after
    assert len(set(after.values())) == len(after)
    os.unlink(mounted.mnt / "created")
    (mounted.mnt / "again").write_text("a")
    assert os.lstat(mounted.mnt / "again").st_ino != before["created"]


def test_worktree_edits_show_through_for_unchanged_paths(mounted: Mounted) -> None:
    view = mounted.mnt / "src" / "main.py"
    assert view.read_text() == "print('hi')\n"
    (mounted.lower / "src" / "main.py").write_text("print('edited outside')\n")
    (mounted.lower / "appeared.txt").write_text("new outside\n")
    assert eventually(lambda: view.read_text() == "print('edited outside')\n")
    assert eventually(lambda: (mounted.mnt / "appeared.txt").exists())
    assert eventually(lambda: "appeared.txt" in os.listdir(mounted.mnt))
    (mounted.lower / "src" / "listed-later.py").write_text("")
    assert eventually(lambda: "listed-later.py" in os.listdir(mounted.mnt / "src"))
    (mounted.mnt / "README").write_text("session's\n")
    (mounted.lower / "README").write_text("outside's\n")
    assert (mounted.mnt / "README").read_text() == "session's\n"


def test_worktree_removals_and_renames_leave_listings(mounted: Mounted) -> None:
    src = mounted.mnt / "src"
    assert sorted(os.listdir(src)) == ["main.py", "pkg"]  # the kernel keeps this listing
    os.unlink(mounted.lower / "src" / "main.py")
    assert eventually(lambda: sorted(os.listdir(src)) == ["pkg"])
    os.rename(mounted.lower / "src" / "pkg", mounted.lower / "src" / "lib")
    assert eventually(lambda: sorted(os.listdir(src)) == ["lib"])
    assert sorted(os.listdir(src / "lib")) == ["mod.py"]


def _real_git_state(repo: Path) -> str:
    """HEAD, every ref, and the bytes of the index, config and HEAD files."""
    files = [repo / ".git" / f for f in ("index", "config", "HEAD")]
    digests = [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    return git(repo, "rev-parse", "HEAD") + git(repo, "for-each-ref") + " ".join(digests)


def test_git_inside_the_view_changes_only_the_session(mounted: Mounted) -> None:
    before = _real_git_state(mounted.lower)
    (mounted.mnt / "README").write_text("session change\n")
    out = git(mounted.mnt, "status", "--porcelain", raw=True)
    assert out == " M README\n"
    git(mounted.mnt, "add", "README")
    git(mounted.mnt, "commit", "-qm", "from the session")
    git(mounted.mnt, "checkout", "-qb", "topic")
    assert git(mounted.mnt, "log", "-1", "--format=%s").strip() == "from the session"
    assert git(mounted.mnt, "status", "--porcelain") == ""
    assert _real_git_state(mounted.lower) == before
    assert (mounted.lower / "README").read_text() == "readme\n"
    # The commit is an object of the session's own: the real repository has none of it.
    commit = git(mounted.mnt, "rev-parse", "HEAD").strip()
    assert git(mounted.lower, "cat-file", "-e", commit, check=False) == ""
    assert not (mounted.lower / ".git" / "objects" / commit[:2] / commit[2:]).exists()
    assert subprocess.run(["git", "fsck"], cwd=mounted.lower).returncode == 0


def test_removing_the_views_git_leaves_the_real_one(mounted: Mounted) -> None:
    before = _real_git_state(mounted.lower)
    objects = sorted(p for p in (mounted.lower / ".git" / "objects").rglob("*"))
    done = subprocess.run(["rm", "-rf", str(mounted.mnt / ".git")], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert not (mounted.mnt / ".git").exists()
    assert _real_git_state(mounted.lower) == before
    assert sorted(p for p in (mounted.lower / ".git" / "objects").rglob("*")) == objects
    assert subprocess.run(["git", "fsck"], cwd=mounted.lower).returncode == 0


@pytest.mark.parametrize("how", ["in place", "renamed over"])
def test_a_git_file_changed_outside_reads_anew(mounted: Mounted, how: str) -> None:
    # The kernel keeps the pages of a file below .git only while the file is as its last
    # open found it; a change of the same size, in place or by a rename, must show.
    real, seen = mounted.lower / ".git" / "HEAD", mounted.mnt / ".git" / "HEAD"
    first = seen.read_bytes()
    assert seen.read_bytes() == first == real.read_bytes()
    changed = bytes(reversed(first[:-1])) + b"\n"
    assert len(changed) == len(first) and changed != first
    if how == "in place":
        with open(real, "r+b") as f:
            f.write(changed)
    else:
        (real.parent / "HEAD.new").write_bytes(changed)
        os.rename(real.parent / "HEAD.new", real)
    assert seen.read_bytes() == changed


def test_a_git_file_made_outside_shows(mounted: Mounted) -> None:
    # Nothing watches `.git`: the kernel may hold "no such file" there for a second only.
    seen = mounted.mnt / ".git" / "refs" / "heads" / "outside"
    assert not seen.exists()
    real = mounted.lower / ".git" / "refs" / "heads" / "outside"
    real.write_bytes((mounted.lower / ".git" / "refs" / "heads" / "main").read_bytes())
    assert eventually(seen.exists, timeout=5)


def test_hard_links_count(mounted: Mounted) -> None:
    os.link(mounted.mnt / "README", mounted.mnt / "README2")
    assert os.stat(mounted.mnt / "README").st_nlink == 2
    (mounted.mnt / "README2").write_text("both\n")
    assert (mounted.mnt / "README").read_text() == "both\n"
    os.unlink(mounted.mnt / "README")
    assert os.stat(mounted.mnt / "README2").st_nlink == 1
    assert (mounted.lower / "README").read_text() == "readme\n"


def test_sparse_file_beyond_4gib(mounted: Mounted) -> None:
    path = mounted.mnt / "sparse"
    with open(path, "wb") as f:
        f.seek(5 * 1024**3)
        f.write(b"end")
    assert os.stat(path).st_size == 5 * 1024**3 + 3
    with open(path, "rb") as f:
        f.seek(5 * 1024**3 - 2)
        assert f.read() == b"\0\0end"
        f.seek(1024**3)
        assert f.read(4) == b"\0\0\0\0"
    mounted.sync()
    (data,) = (mounted.spec.session_dir / "data").iterdir()
    assert data.stat().st_size == 5 * 1024**3 + 3
    assert data.stat().st_blocks * 512 < 1024**2  # the hole takes no room


def test_rename_flags(mounted: Mounted) -> None:
    from tests.util import renameat2

    a, b = bytes(mounted.mnt / "README"), bytes(mounted.mnt / "src" / "main.py")
    with pytest.raises(Exception) as info:
        renameat2(a, b, 1)  # RENAME_NOREPLACE
    assert getattr(info.value, "errno", None) == errno.EEXIST
    renameat2(a, b, 2)  # RENAME_EXCHANGE
    assert (mounted.mnt / "README").read_text() == "print('hi')\n"
    assert (mounted.mnt / "src" / "main.py").read_text() == "readme\n"


def test_exchanging_a_directory_and_a_file_moves_the_link_counts(mounted: Mounted) -> None:
    from tests.util import renameat2

    src, bin_ = mounted.mnt / "src", mounted.mnt / "bin"
    (src / "new").mkdir()
    before = os.lstat(src).st_nlink, os.lstat(bin_).st_nlink  # both counted (and kept) here
    assert before == (4, 2)  # src holds pkg and new
    renameat2(bytes(src / "new"), bytes(bin_ / "tool"), 2)  # RENAME_EXCHANGE
    assert stat.S_ISREG(os.lstat(src / "new").st_mode) and (bin_ / "tool").is_dir()
    assert (os.lstat(src).st_nlink, os.lstat(bin_).st_nlink) == (3, 3)


def test_fifo_symlink_and_xattrs(mounted: Mounted) -> None:
    os.mkfifo(mounted.mnt / "pipe")
    assert stat.S_ISFIFO(os.lstat(mounted.mnt / "pipe").st_mode)
    os.symlink("src/main.py", mounted.mnt / "alias")
    assert os.readlink(mounted.mnt / "alias") == "src/main.py"
    assert (mounted.mnt / "alias").read_text() == "print('hi')\n"
    assert os.readlink(mounted.mnt / "link") == "README"
    os.setxattr(mounted.mnt / "README", "user.a", b"1")
    os.setxattr(mounted.mnt / "README", "user.b", b"2")
    assert sorted(os.listxattr(mounted.mnt / "README")) == ["user.a", "user.b"]
    os.removexattr(mounted.mnt / "README", "user.a")
    assert os.listxattr(mounted.mnt / "README") == ["user.b"]


def test_mmap_read_and_write(mounted: Mounted) -> None:
    import mmap

    path = mounted.mnt / "README"
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        assert mm[:6] == b"readme"
        mm[:6] = b"README"
        mm.flush()
    assert path.read_text() == "README\n"
    assert (mounted.lower / "README").read_text() == "readme\n"


def test_state_survives_remount(mounted: Mounted) -> None:
    (mounted.mnt / "d").mkdir()
    (mounted.mnt / "d" / "f").write_bytes(b"x" * 300_000)
    os.unlink(mounted.mnt / "README")
    os.chmod(mounted.mnt / "bin" / "tool", 0o700)
    mounted.remount()
    assert (mounted.mnt / "d" / "f").read_bytes() == b"x" * 300_000
    assert not (mounted.mnt / "README").exists()
    assert stat.S_IMODE(os.stat(mounted.mnt / "bin" / "tool").st_mode) == 0o700


def test_kill_9_during_writes_keeps_delta_consistent(mounted: Mounted, tmp_path: Path) -> None:
    import time

    (mounted.mnt / "synced").write_bytes(b"s" * 200_000)
    fd = os.open(mounted.mnt / "synced", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    writer = subprocess.Popen(
        [
            "sh",
            "-c",
            f"i=0; while true; do i=$((i+1)); head -c 65536 /dev/urandom > {mounted.mnt}/w$i; done",
        ]
    )
    daemon = mounted.daemon_pid()
    # (the daemon starts its watch from a thread of its own, maybe after it answered)
    assert eventually(lambda: len(_watch_processes(daemon)) == 1)
    watch = _watch_processes(daemon)
    try:
        time.sleep(1.0)
        os.kill(daemon, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    from gitsess.runtime import mount

    assert eventually(lambda: mount.status(mounted.spec.session_dir) is None)
    # The lower watch ends with its daemon (its stdin closes), killed or not.
    assert eventually(lambda: not os.path.exists(f"/proc/{watch[0]}"))
    mount.clean_stale(mounted.mnt)
    conn = apsw.Connection(str(mounted.spec.delta))
    assert list(conn.execute("PRAGMA integrity_check")) == [("ok",)]
    conn.close()
    mounted.mount()
    assert (mounted.mnt / "synced").read_bytes() == b"s" * 200_000


def _watch_processes(daemon: int) -> list[int]:
    # A restarted watch is a child of the daemon's watcher thread, not of its main thread.
    children = [pid for task in Path(f"/proc/{daemon}/task").iterdir() for pid in _children(task)]
    return [int(pid) for pid in children if b"watch_process" in _cmdline(pid)]


def _cmdline(pid: str) -> bytes:
    """What /proc says `pid` runs; nothing once it is gone (the killed watch, reaped after it
    was listed, reads as ESRCH)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def test_a_watch_that_dies_is_started_again(mounted: Mounted) -> None:
    view = mounted.mnt / "src" / "main.py"
    assert view.read_text() == "print('hi')\n"  # the kernel now holds it for 300 s
    daemon = mounted.daemon_pid()
    assert eventually(lambda: len(_watch_processes(daemon)) == 1)
    (first,) = _watch_processes(daemon)
    os.kill(first, signal.SIGKILL)
    assert eventually(lambda: [p for p in _watch_processes(daemon) if p != first] != [])
    (mounted.lower / "src" / "main.py").write_text("print('edited after the restart')\n")
    assert eventually(lambda: view.read_text() == "print('edited after the restart')\n")
    (mounted.lower / "appeared.txt").write_text("new outside\n")
    assert eventually(lambda: "appeared.txt" in os.listdir(mounted.mnt))


def _children(task: Path) -> list[str]:
    try:
        return (task / "children").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return []  # the thread ended meanwhile


def test_changes_made_while_unmounted_show_as_drift(mounted: Mounted) -> None:
    (mounted.mnt / "README").write_text("session's\n")
    mounted.unmount()
    (mounted.lower / "README").write_text("edited while nothing watched\n")
    (mounted.lower / "src" / "main.py").write_text("not the session's\n")
    mounted.mount()
    assert eventually(lambda: rows(mounted, "SELECT path FROM drift") == [("README",)])
    assert (mounted.mnt / "README").read_text() == "session's\n"
    assert (mounted.mnt / "src" / "main.py").read_text() == "not the session's\n"


def test_dropping_applied_paths_leaves_the_delta(mounted: Mounted) -> None:
    (mounted.mnt / "README").write_text("changed\n")
    (mounted.mnt / "src" / "pkg" / "new.py").write_text("new\n")
    os.unlink(mounted.mnt / "bin" / "tool")
    (mounted.mnt / "fresh").mkdir()
    (mounted.mnt / "fresh" / "f").write_text("f\n")
    # What `apply --worktree` does to the real tree, then the drop it asks of the daemon.
    (mounted.lower / "README").write_text("changed\n")
    assert eventually(lambda: rows(mounted, "SELECT path FROM drift") == [("README",)])
    (mounted.lower / "src" / "pkg" / "new.py").write_text("new\n")
    os.unlink(mounted.lower / "bin" / "tool")
    (mounted.lower / "fresh").mkdir()
    (mounted.lower / "fresh" / "f").write_text("f\n")
    paths = ["README", "src/pkg/new.py", "bin/tool", "fresh", "fresh/f"]
    reply = protocol.drop(str(mounted.spec.session_dir), paths)
    assert reply is not None and reply.kept == []
    assert rows(mounted, "SELECT name, ino FROM dentries WHERE ino != 0 AND parent = 1") == []
    assert data_files(mounted) == {}
    assert rows(mounted, "SELECT count(*) FROM drift") == [(0,)]
    assert (mounted.mnt / "README").read_text() == "changed\n"
    assert (mounted.mnt / "fresh" / "f").read_text() == "f\n"
    assert not (mounted.mnt / "bin" / "tool").exists()
    (mounted.lower / "README").write_text("edited outside later\n")
    assert eventually(lambda: (mounted.mnt / "README").read_text() == "edited outside later\n")


def _listed(directory: Path) -> dict[str, tuple[int, bool, bool]]:
    with os.scandir(directory) as entries:
        return {
            e.name: (e.inode(), e.is_dir(follow_symlinks=False), e.is_symlink()) for e in entries
        }


def _looked_up(directory: Path) -> dict[str, tuple[int, bool, bool]]:
    found = {}
    for name in os.listdir(directory):
        st = os.lstat(directory / name)
        found[name] = (st.st_ino, stat.S_ISDIR(st.st_mode), stat.S_ISLNK(st.st_mode))
    return found


def test_listing_of_entries_the_kernel_holds_names_the_same_inodes(mounted: Mounted) -> None:
    (mounted.mnt / "made").write_text("upper\n")
    os.symlink("made", mounted.mnt / "made-link")
    root = mounted.mnt
    looked_up = _looked_up(root)  # the kernel now holds every entry: listed by name alone
    assert {"README", "src", "link", "made", "made-link"} <= set(looked_up)
    # a listing the kernel did not keep (the directory changed), served by the daemon again
    (root / "made-dir").mkdir()
    looked_up["made-dir"] = (os.lstat(root / "made-dir").st_ino, True, False)
    assert _listed(root) == looked_up
    # attributes the kernel kept through the listing are still right
    assert os.lstat(root / "README").st_size == len("readme\n")
    assert (root / "made").read_text() == "upper\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may set a mount's read-ahead")
def test_the_view_reads_ahead_more_than_the_kernels_default(mounted: Mounted) -> None:
    st = os.stat(mounted.mnt)
    setting = Path(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb")
    assert eventually(lambda: setting.read_text() == f"{daemon.READ_AHEAD_KB}\n", timeout=5)
    # Two whole READs: the kernel sends the rest of a window that is no multiple of the READ
    # size as a READ of its own.
    window = daemon.READ_AHEAD_KB * 1024
    assert window == 2 * pyfuse3.read_size()
    # and each READ's reply fits the pipe it is spliced through (patch 0006)
    pipe_max = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    assert pyfuse3.read_size() <= pipe_max - 4 * os.sysconf("SC_PAGESIZE")
    big = mounted.lower / "big"
    big.write_bytes(os.urandom(3 << 20))
    assert (mounted.mnt / "big").read_bytes() == big.read_bytes()


def test_a_copy_the_daemon_cannot_make_is_an_error_reply(mounted: Mounted, tmp_path: Path) -> None:
    session = str(mounted.spec.session_dir)
    assert control.request(session, {"op": "copy"}) == {
        "ok": False,
        "error": "copy goes to delta.db of a new session's dir",
    }
    reply = control.request(session, {"op": "copy", "dest": str(tmp_path / "no" / "delta.db")})
    assert reply is not None and reply["ok"] is False and "delta.db" in reply["error"]
    (mounted.mnt / "still-served").write_text("yes\n")
    assert (mounted.mnt / "still-served").read_text() == "yes\n"


def test_a_malformed_control_request_is_an_error_reply(mounted: Mounted) -> None:
    session = str(mounted.spec.session_dir)
    reply = control.request(session, {"op": "drop", "paths": 5})
    assert reply is not None and reply["ok"] is False and "bad request" in reply["error"]
    sock = control.connect(session)
    assert sock is not None
    with sock:
        sock.sendall(b"[1, 2]\n")
        assert b'"ok": false' in sock.recv(65536)
    assert control.request(session, {"op": "status"}) is not None  # the daemon still serves
    assert (mounted.mnt / "README").read_text() == "readme\n"


def test_an_unknown_op_is_an_error_reply(mounted: Mounted) -> None:
    session = str(mounted.spec.session_dir)
    for op in ("nope", ["status"], None):
        assert control.request(session, {"op": op}) == {
            "ok": False,
            "error": f"unknown op {op!r}",
        }
    assert protocol.status(session) is not None  # the daemon still serves


def _attrs(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_mode, st.st_nlink, st.st_uid, st.st_gid, st.st_size, st.st_blocks,
            st.st_mtime_ns, st.st_ctime_ns)  # fmt: skip


@pytest.mark.parametrize("listed_first", [True, False])
def test_worktree_objects_show_their_worktree_attributes(
    mounted: Mounted, listed_first: bool
) -> None:
    """Attributes of worktree objects reach the kernel from their lstat, filled in C on the
    patched pyfuse3 (`entry_from_stat`): from a listing's READDIRPLUS, or from a lookup."""
    lower = mounted.lower / "attrs"
    lower.mkdir()
    (lower / "plain").write_bytes(b"x" * 5000)
    os.utime(lower / "plain", ns=(1_234_567_891, 9_876_543_219))
    (lower / "tool").write_text("#!/bin/sh\n")
    (lower / "tool").chmod(0o751)
    os.chown(lower / "tool", 1234, 5678)
    os.link(lower / "plain", lower / "twice")
    (lower / "sub").mkdir()
    (lower / "link").symlink_to("plain")
    mounted.remount()  # none of it known to the kernel yet
    view = mounted.mnt / "attrs"
    if listed_first:
        assert sorted(os.listdir(view)) == ["link", "plain", "sub", "tool", "twice"]
    for name in ("plain", "tool", "twice", "sub", "link"):
        assert _attrs(os.lstat(view / name)) == _attrs(os.lstat(lower / name)), name


@pytest.mark.parametrize("where", ["worktree", ".git"])
def test_big_reads_of_worktree_files_match_the_worktree(mounted: Mounted, where: str) -> None:
    """Reads of 64 KiB and more of a worktree file (or of one under `.git`, passed through)
    are answered with a slice of the open file, spliced on the patched pyfuse3: every byte,
    at any offset, up to the end and past it, as the worktree has them."""
    data = os.urandom(3 * 1024 * 1024 + 12345)
    rel = Path("big.bin") if where == "worktree" else Path(".git") / "big.bin"
    (mounted.lower / rel).write_bytes(data)
    mounted.remount()
    view = mounted.mnt / rel
    assert view.read_bytes() == data
    fd = os.open(view, os.O_RDONLY)
    try:
        for off, size in [(0, 1 << 20), (3 * 65536 + 7, 200_000), (len(data) - 100, 65536),
                          (len(data) + 10, 65536), (12345, 65535)]:  # fmt: skip
            assert os.pread(fd, size, off) == data[off : off + size], (off, size)
    finally:
        os.close(fd)
