"""The first `git status` in a session: git trusts the session's fsmonitor for it (the view
shows the real index with an fsmonitor extension of the session's, `overlay/index_view.py`),
and what it says is what a full scan says (issue 41, item 2)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitsess.git import indexfile
from gitsess.overlay import index_view, objectdir
from gitsess.services.live import FSMONITOR_CONFIG, git_config_env
from tests.live_util import eventually
from tests.overlay.conftest import Mounted
from tests.overlay.test_fsmonitor import status as status_all
from tests.util import into_the_past

pytestmark = pytest.mark.fuse

PAST = time.time() - 1000
KEPT = 20


def counted(trace: str, what: str) -> int:
    """A count of git's trace: `/sum_lstat`, the files it looked at itself; `opendir`, the
    directories it listed."""
    lines = trace.splitlines()
    return sum(int(line.rpartition(":")[2]) for line in lines if f"{what}:" in line)


def settled(lower: Path, *, untracked_cache: bool = True) -> None:
    """The real worktree as an old checkout is: its files and directories older than its
    index (not racily clean), and the index written by a native `git status`, with an
    untracked cache when asked."""
    keep = lower / "keep"
    keep.mkdir(exist_ok=True)
    for i in range(KEPT):
        (keep / f"k{i}.txt").write_text(f"{i}\n")
    subprocess.run(["git", "add", "keep"], cwd=lower, check=True)
    subprocess.run(["git", "commit", "-qm", "keep"], cwd=lower, check=True)
    into_the_past(lower, PAST)
    flag = "true" if untracked_cache else "false"
    for _ in range(2):  # the first makes the untracked cache, the second fills it
        subprocess.run(
            ["git", "-c", f"core.untrackedCache={flag}", "status", "--porcelain"],
            cwd=lower, check=True, capture_output=True,
        )  # fmt: skip


def status(m: Mounted, *, monitored: bool) -> str:
    """As `test_fsmonitor.status` does, with untracked files listed as git lists them by
    default: the untracked cache serves only that (`-unormal`)."""
    return status_all(m, monitored=monitored, untracked="normal")


def first_status(m: Mounted) -> tuple[str, str]:
    """The monitored `git status` (the first one of the view, when called first), and what
    git's trace says of its fsmonitor query and of the files it looked at itself."""
    trace = m.spec.session_dir / "first.trace"
    trace.unlink(missing_ok=True)
    os.environ["GIT_TRACE2_PERF"] = str(trace)
    try:
        out = status(m, monitored=True)
    finally:
        del os.environ["GIT_TRACE2_PERF"]
    return out, trace.read_text()


def test_a_taken_git_unit_loads_no_pygit2(mounted: Mounted) -> None:
    """A status takes the index's lock, which makes HEAD, the index and the branch the
    session's own: reading HEAD for that needs no libgit2 (loading it cost some 60 ms)."""
    subprocess.run(["git", "status", "--porcelain"], cwd=mounted.mnt, check=True)
    assert (mounted.mnt / ".git" / "index").exists()
    with open(f"/proc/{mounted.daemon_pid()}/maps") as f:
        assert "libgit2" not in f.read()


@pytest.mark.parametrize("untracked_cache", [True, False])
def test_the_first_status_trusts_the_hook_and_agrees_with_a_full_scan(
    mounted: Mounted, untracked_cache: bool
) -> None:
    lower, m = mounted.lower, mounted.mnt
    settled(lower, untracked_cache=untracked_cache)
    # changes of the real worktree the real index does not know of
    (lower / "src" / "main.py").write_text("print('ho')\n")  # same size, new mtime
    (lower / "src" / "pkg" / "new.py").write_text("untracked in the real tree\n")
    os.chmod(lower / "bin" / "tool", 0o644)
    # and of the session's, kept from an earlier mount
    (m / "README").write_text("changed in the session\n")
    os.unlink(m / "link")
    os.rename(m / "src" / "pkg", m / "lib")
    (m / "made").mkdir()
    (m / "made" / "a.txt").write_text("a\n")
    mounted.remount()
    out, trace = first_status(mounted)
    assert "query/trivial-response" not in trace
    assert counted(trace, "/sum_lstat") <= 6  # of 25: what changed, not every file
    assert out == status(mounted, monitored=False)
    assert "? lib/\n" in out and "? made/\n" in out and "1 .M N... 100755 100755 100644" in out


def test_an_edit_just_before_the_first_status_is_in_it(mounted: Mounted) -> None:
    settled(mounted.lower)
    mounted.wait_watched()
    (mounted.lower / "README").write_text("edited a moment ago\n")
    (mounted.lower / "src" / "fresh.py").write_text("new\n")
    out, trace = first_status(mounted)
    assert out == status(mounted, monitored=False)
    assert "README" in out and "? src/fresh.py" in out
    # the root (the session's own) and src listed again; the rest from the untracked cache
    assert counted(trace, "opendir") == 2


def test_an_edit_after_the_sweep_ahead_is_in_the_first_status(mounted: Mounted) -> None:
    """The worktree is swept against the real index when the view first shows it, before git
    asks: what changed after that sweep comes from the lower watch."""
    settled(mounted.lower)
    mounted.wait_watched()
    assert (mounted.mnt / ".git" / "index").read_bytes()[:4] == b"DIRC"  # shown: swept
    time.sleep(0.5)  # (no timing asserted: only that the sweep is likely over)
    (mounted.lower / "README").write_text("Readme\n")  # same size: only its times tell
    os.chmod(mounted.lower / "bin" / "tool", 0o644)
    (mounted.lower / "src" / "later.py").write_text("new\n")
    out, trace = first_status(mounted)
    assert "query/trivial-response" not in trace
    assert counted(trace, "/sum_lstat") <= 6
    assert out == status(mounted, monitored=False)
    assert "? src/later.py" in out and "1 .M N... 100755 100755 100644" in out
    assert "1 .M N... 100644 100644 100644" in out  # README


def watch_processes(daemon: int) -> set[int]:
    """The lower watches the daemon started (a killed one stays, a zombie, until reaped)."""
    kids: set[int] = set()
    for task in os.listdir(f"/proc/{daemon}/task"):
        with open(f"/proc/{daemon}/task/{task}/children") as f:
            kids.update(int(pid) for pid in f.read().split())
    return {pid for pid in kids if dead(pid) or b"lower_watch_process" in cmdline(pid)}


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def dead(pid: int) -> bool:
    """Gone, or a zombie (its parent, stopped, has not reaped it)."""
    return not cmdline(pid)


def test_a_sweep_ahead_is_not_trusted_across_a_lost_watch(mounted: Mounted) -> None:
    """An edit made while no watch was in place is in no journal: the sweep made before it
    cannot answer for it, so the query sweeps again."""
    settled(mounted.lower)
    mounted.wait_watched()
    assert (mounted.mnt / ".git" / "index").read_bytes()[:4] == b"DIRC"  # shown: swept
    time.sleep(0.5)  # (no timing asserted: only that the sweep is likely over)
    _edit_while_the_watch_is_down(mounted)
    out, trace = first_status(mounted)
    assert "query/trivial-response" not in trace
    assert out == status(mounted, monitored=False)
    assert "1 .M N... 100644 100644 100644" in out


def test_a_journal_token_is_not_trusted_across_a_lost_watch(mounted: Mounted) -> None:
    """As for the sweep: a token the journal gave before the watch was lost names a position
    in a journal that missed what changed meanwhile, so it gets "everything"."""
    settled(mounted.lower)
    mounted.wait_watched()
    for _ in range(2):  # the second asks with the journal's token the first wrote
        status(mounted, monitored=True)
    _edit_while_the_watch_is_down(mounted)
    out = status(mounted, monitored=True)
    assert out == status(mounted, monitored=False)
    assert "1 .M N... 100644 100644 100644" in out


def test_a_real_index_changed_after_it_was_shown_is_not_trusted(mounted: Mounted) -> None:
    settled(mounted.lower)
    assert (mounted.mnt / ".git" / "index").read_bytes()[:4] == b"DIRC"  # shown once
    (mounted.lower / "README").write_text("staged outside\n")
    subprocess.run(["git", "add", "README"], cwd=mounted.lower, check=True)
    out, _ = first_status(mounted)
    assert out == status(mounted, monitored=False)
    assert "1 M. N... 100644 100644 100644" in out


def test_the_shown_index_reads_as_the_real_one(mounted: Mounted) -> None:
    """Same entries, same trees: only the fsmonitor extension differs (and git checks it)."""
    settled(mounted.lower)
    env = {**os.environ, **git_config_env({}, FSMONITOR_CONFIG)}
    args = ["git", "ls-files", "--stage", "--debug"]
    real = subprocess.run(args, cwd=mounted.lower, capture_output=True, text=True, check=True)
    view = subprocess.run(args, cwd=mounted.mnt, env=env, capture_output=True, text=True)
    assert view.returncode == 0, view.stderr
    assert view.stdout.replace(str(mounted.mnt), "") == real.stdout.replace(str(mounted.lower), "")
    copy = mounted.spec.session_dir / "shown"
    shutil.copyfile(mounted.mnt / ".git" / "index", copy)
    fsck = subprocess.run(
        ["git", "-c", "core.fsmonitor=true", "ls-files", "--debug"],
        cwd=mounted.lower, env={**os.environ, "GIT_INDEX_FILE": str(copy)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert fsck.returncode == 0 and "error" not in fsck.stderr, fsck.stderr


def sights(m: Mounted) -> dict[str, list[str]]:
    """A monitored `git status` (that leaves the index as it is) seen from the mount point,
    and seen in place (the view bound over the worktree's path in a mount namespace of its
    own, as an in-place run sees it), each with the trace file it writes to."""
    state = m.spec.session_dir.parent / "state"
    link = state / "sessions" / m.spec.session_id  # where the hook finds the daemon
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(m.spec.session_dir)
    env = {
        **os.environ, **git_config_env({}, FSMONITOR_CONFIG),
        "GITSESS_SESSION_ID": m.spec.session_id, "GITSESS_DIR": str(state),
    }  # fmt: skip
    git = "git --no-optional-locks status --porcelain=v2 --untracked-files=normal"
    # The view over the worktree covers the real object store, which the session's store
    # borrows by a symlink at `$3`: as a run does (`inplace._bind_objects`), the real store is
    # bound there first, read-only.
    borrow = (
        'mount -t tmpfs none "$3" && mkdir "$3/objects" && mount -o ro --bind "$4" "$3/objects"'
    )
    in_place = f'{borrow} && mount --bind "$1" "$2" && cd "$2" && {git}'
    sh = ["unshare", "--mount", "--propagation", "private", "sh", "-c", in_place, "-"]
    os.environ.update(env)
    lower = m.spec.session_dir / os.fsdecode(objectdir.LOWER)
    return {
        "mount point": ["sh", "-c", f"cd {m.mnt} && {git}"],
        "in place": [*sh, str(m.mnt), str(m.lower), str(lower), str(m.lower / ".git" / "objects")],
    }


def seen_from(m: Mounted, argv: list[str], trace: Path) -> str:
    trace.unlink(missing_ok=True)
    done = subprocess.run(
        argv, env={**os.environ, "GIT_TRACE2_PERF": str(trace)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_untracked_cache_holds_in_place_and_at_the_mount_point(mounted: Mounted) -> None:
    """git keeps an untracked cache only where it was made ("Location <path>"): the view
    shows each opener the index made where it stands (in an in-place run the worktree's own
    path), and after a `HOLD` the other one."""
    settled(mounted.lower)
    expected = status(mounted, monitored=False)
    saved = dict(os.environ)
    try:
        for where, argv in [*sights(mounted).items(), *reversed(sights(mounted).items())]:
            trace = mounted.spec.session_dir / "sight.trace"
            time.sleep(index_view.HOLD)
            assert seen_from(mounted, argv, trace) == expected, where
            text = trace.read_text()
            assert counted(text, "node-creation") == 0, where  # the cache kept, not made anew
            assert counted(text, "/sum_lstat") <= 1, where
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_openers_from_both_sights_at_once_read_a_whole_index(mounted: Mounted) -> None:
    """The kernel keeps one page cache for `.git/index`: two variants read at once must not
    mix (git checks the index's checksum and would fail)."""
    settled(mounted.lower)
    expected = status(mounted, monitored=False)
    saved = dict(os.environ)
    try:
        argvs = list(sights(mounted).values())
        for _ in range(5):
            time.sleep(index_view.HOLD)
            procs = [
                subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for argv in argvs * 2
            ]
            for p in procs:
                out, err = p.communicate()
                assert p.returncode == 0 and out == expected, err
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_git_finding_its_repository_lists_nothing_ahead(mounted: Mounted) -> None:
    """git's first lookup is `.git` in its worktree's top, and with the session's fsmonitor
    a status looks up no other name there: listing the top and its subdirectories ahead for
    it was 100 READDIRPLUS in the way of the status's own requests (on the 5,000-file corpus)."""
    mounted.wait_watched()
    os.stat(mounted.mnt / ".git")
    mounted.wait_listed()  # (a listing ahead the lookup asked for would be done by now)
    os.stat(mounted.mnt)  # the walk to the names checks the top's permissions
    code = "import os, sys\nos.lstat(sys.argv[1])"
    assert mounted.run_while_stopped(code, str(mounted.mnt / "README"), wait=1) is None
    # (the check sees a listing ahead: a lookup of another name lists its directory; in a
    # fresh view, as a stopped daemon may have lost its watch meanwhile)
    mounted.remount()
    mounted.wait_watched()
    os.lstat(mounted.mnt / "src")
    mounted.wait_listed()
    os.stat(mounted.mnt)
    assert mounted.run_while_stopped(code, str(mounted.mnt / "link"), wait=10) is not None


def fsmonitor_token(index: Path) -> str | None:
    data = index.read_bytes()
    parsed = indexfile.parse(data)
    assert parsed is not None
    return indexfile.fsmonitor_token(parsed)


def test_a_remounted_sessions_own_index_is_answered_by_a_sweep(mounted: Mounted) -> None:
    """After a remount the session's own index names an old daemon's journal: the token is
    answered by sweeping that index (still the one the view mounted with), not with
    "everything" (git would look up every file through FUSE)."""
    settled(mounted.lower)
    (mounted.mnt / "README").write_text("changed in the session\n")
    status(mounted, monitored=True)  # the index the session's own, with this daemon's token
    token = fsmonitor_token(mounted.mnt / ".git" / "index")
    assert token is not None and token.startswith("gitsess:")
    mounted.unmount()
    (mounted.lower / "src" / "main.py").write_text("print('ho')\n")  # same size, new mtime
    (mounted.lower / "src" / "pkg" / "new.py").write_text("untracked in the real tree\n")
    os.chmod(mounted.lower / "bin" / "tool", 0o644)
    mounted.mount()
    assert fsmonitor_token(mounted.mnt / ".git" / "index") == token  # what git reads first
    out, trace = first_status(mounted)
    assert "query/trivial-response" not in trace
    assert counted(trace, "/sum_lstat") <= 6  # of 25: what changed, not every file
    assert out == status(mounted, monitored=False)
    assert "? src/pkg/new.py" in out and "1 .M N... 100755 100755 100644 " in out
    assert "1 .M N... 100644 100644 100644" in out  # README and src/main.py
    assert " README\n" in out and " src/main.py\n" in out


def test_a_remount_token_after_the_index_was_replaced_means_everything(mounted: Mounted) -> None:
    """Once the index the view mounted with was replaced, the old journal's token may come
    from either: git is told to check everything, and its status stays right."""
    settled(mounted.lower)
    status(mounted, monitored=True)
    token = fsmonitor_token(mounted.mnt / ".git" / "index")
    mounted.remount()
    # replaced with the same bytes (as a git that asked the hook nothing would keep the token)
    index = mounted.mnt / ".git" / "index"
    shutil.copyfile(index, index.with_name("index.new"))
    os.rename(index.with_name("index.new"), index)
    assert fsmonitor_token(mounted.mnt / ".git" / "index") == token
    (mounted.lower / "README").write_text("Readme\n")  # same size: only its times tell
    out, trace = first_status(mounted)
    assert "query/trivial-response" in trace
    assert "1 .M N... 100644 100644 100644" in out and "README" in out


def test_the_hook_loads_no_python_module_of_json_or_sockets(tmp_path: Path) -> None:
    """It runs for every `git status`: `json` and `socket` (with `re` and `enum` behind them)
    doubled its CPU time; with no daemon to ask it still answers "everything"."""
    from gitsess.overlay import fsmonitor_hook

    done = subprocess.run(
        [sys.executable, "-S", "-E", "-X", "importtime", fsmonitor_hook.__file__, "2", "t"],
        env={"GITSESS_DIR": str(tmp_path), "GITSESS_SESSION_ID": "none"},
        capture_output=True, check=True,
    )  # fmt: skip
    loaded = {line.rpartition(b"|")[2].strip() for line in done.stderr.splitlines()}
    assert not loaded & {b"json", b"socket", b"re", b"enum", b"gitsess"}
    assert done.stdout == fsmonitor_hook.UNKNOWN.encode() + b"\0/\0"


def _edit_while_the_watch_is_down(mounted: Mounted) -> None:
    """Kill the worktree's watch process, edit README (same size: only its times tell) before
    the daemon can start another, and wait until a new watch is in place."""
    daemon = mounted.daemon_pid()
    (watch,) = watch_processes(daemon)
    os.kill(daemon, signal.SIGSTOP)  # so it starts no new watch before the edit
    try:
        os.kill(watch, signal.SIGKILL)
        assert eventually(lambda: dead(watch))
        (mounted.lower / "README").write_text("Readme\n")
    finally:
        os.kill(daemon, signal.SIGCONT)
    assert eventually(lambda: watch_processes(daemon) - {watch} != set())
    mounted.wait_watched()
