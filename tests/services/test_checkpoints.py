"""Checkpoints, rewind and undo of real sessions: mounted (the daemon rewinds between two
requests) and not, through the command line, with readers running and daemons killed."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitsess.git.repo import RepoContext
from gitsess.overlay import protocol
from gitsess.services import checkpoints, live, sessions
from gitsess.store.registry import Session
from tests.live_util import InProcess, call, eventually
from tests.util import GITSESS, gitsess

pytestmark = pytest.mark.fuse

# The gitsess program as a command inside `sh -c`.
GS = " ".join(shlex.quote(a) for a in GITSESS)


def run(repo: Path, session: str, script: str) -> subprocess.CompletedProcess[str]:
    done = gitsess(repo, "run", "-s", session, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done


def test_undo_after_a_run_that_went_wrong(repo: Path, gs: InProcess) -> None:
    run(repo, "s", "echo good > README.md; mkdir -p keep; echo kept > keep/file")
    run(repo, "s", "echo ruined > README.md; rm -rf keep src; echo junk > junk; git add -A")
    found = gs.json("checkpoints", "s")
    kinds = [c["kind"] for c in found["checkpoints"]]
    assert kinds == ["run", "run"]
    assert found["changed_since_last"]
    out = gs.ok("undo", "s")
    assert "back at checkpoint 2" in out
    assert (
        run(repo, "s", "cat README.md keep/file; ls").stdout == "good\nkept\nREADME.md\nkeep\nsrc\n"
    )
    # The run that only read made no checkpoint; undo again brings the ruined state back.
    assert len(gs.json("checkpoints", "s")["checkpoints"]) == 4
    gs.ok("undo", "s")
    assert run(repo, "s", "cat README.md; ls").stdout == "ruined\nREADME.md\njunk\n"
    gs.ok("undo", "s")
    # ... and the session's git state with it (the index `git add -A` wrote is undone)
    status = run(repo, "s", "git status --short").stdout
    assert status == " M README.md\n?? keep/\n"
    assert (repo / "README.md").read_text() == "hello\n"  # the real worktree never moved


def test_checkpoint_and_rewind_offline(repo: Path, ctx: RepoContext, gs: InProcess) -> None:
    run(repo, "off", "echo one > f")
    assert "Checkpoint 2" in gs.ok("checkpoint", "off", "-m", "after one")
    run(repo, "off", "echo two > f; echo more > g")
    assert gs.ok("fs", "off", "cat", "f", "--at", "2") == "one\n"
    assert gs.ok("fs", "off", "cat", "f") == "two\n"
    assert "no checkpoint 99" in gs.fails("rewind", "off", "99")
    assert "no checkpoint 99" in gs.fails("fs", "off", "cat", "f", "--at", "99")
    # a number past SQLite's integers is no checkpoint either (it was an OverflowError)
    huge = str(1 << 64)
    assert f"no checkpoint {huge}" in gs.fails("rewind", "off", huge)
    assert f"no checkpoint {huge}" in gs.fails("fs", "off", "cat", "f", "--at", huge)
    assert f"no checkpoint {huge}" in gs.fails("fork", "off", "off2", "--at", huge)
    gs.ok("rewind", "off", "2")
    assert gs.ok("fs", "off", "cat", "f") == "one\n"
    assert "g" not in gs.ok("fs", "off", "ls")
    listed = gs.json("checkpoints", "off")
    assert [c["message"] for c in listed["checkpoints"]][1] == "after one"
    assert [o["kind"] for o in listed["operations"]] == ["rewind"]


def _reader(
    mnt: Path, names: list[str], stop: threading.Event, seen: list[str], same_size: bool
) -> None:
    while not stop.is_set():
        for name in names:
            try:
                data = (mnt / name).read_bytes()
            except OSError as e:
                seen.append(f"{name}: {e}")
                continue
            if data not in (_content(name, b"1", same_size), _content(name, b"2", same_size)):
                seen.append(f"{name}: {data[:40]!r}")


def _content(name: str, version: bytes, same_size: bool = False) -> bytes:
    # Sizes differ by version, so a page kept from the other state shows; or they are the
    # same, and nothing but the kernel dropping its pages shows the other state.
    if same_size:
        return (name.encode() + version) * 3000
    return (name.encode() + version) * (50 if version == b"1" else 3000)


def _two_versions(ctx: RepoContext, names: list[str], same_size: bool) -> tuple[Session, Path, int]:
    """A mounted session whose files `names` hold version 2, and the checkpoint of version 1."""
    session = sessions.create(ctx, "live")
    mnt = Path(
        live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        ).mountpoint
    )
    for name in names:
        (mnt / name).write_bytes(_content(name, b"1", same_size))
    cp = checkpoints.checkpoint(ctx, session, "v1").checkpoint
    assert cp is not None
    for name in names:
        (mnt / name).write_bytes(_content(name, b"2", same_size))
    return session, mnt, cp


@pytest.mark.parametrize("same_size", [False, True], ids=["sizes differ", "same sizes"])
def test_live_rewind_is_seen_whole_by_a_reader(
    repo: Path, ctx: RepoContext, same_size: bool
) -> None:
    names = [f"f{i}" for i in range(200)]
    session, mnt, cp = _two_versions(ctx, names, same_size)
    stop, seen = threading.Event(), []  # type: ignore[var-annotated]
    reader = threading.Thread(target=_reader, args=(mnt, names, stop, seen, same_size))
    reader.start()
    try:
        time.sleep(0.3)
        done = checkpoints.rewind(ctx, session, cp)
        assert done.live
        # Once the rewind answered, every read sees the old state: no page of the new one.
        assert all((mnt / n).read_bytes() == _content(n, b"1", same_size) for n in names)
        time.sleep(0.3)
    finally:
        stop.set()
        reader.join()
    assert seen == []
    checkpoints.undo(ctx, session)
    assert all((mnt / n).read_bytes() == _content(n, b"2", same_size) for n in names)


def test_a_file_held_open_reads_what_the_rewind_left_once_it_answered(
    repo: Path, ctx: RepoContext
) -> None:
    # Read with pread of the size alone, which asks the kernel for no attributes (a read past
    # the size it holds would): nothing but the daemon dropping the kernel's pages, those read
    # from the rewind's hold too, shows the new state.
    names = [f"f{i:02d}" for i in range(50)]
    size = len(_content(names[0], b"1", same_size=True))
    session, mnt, cp = _two_versions(ctx, names, same_size=True)
    with contextlib.ExitStack() as stack:
        fds = [os.open(mnt / n, os.O_RDONLY) for n in names]
        for fd in fds:
            stack.callback(os.close, fd)
        stop = threading.Event()

        def read_on() -> None:
            while not stop.is_set():
                for fd in fds:
                    os.pread(fd, size, 0)

        reader = threading.Thread(target=read_on)
        reader.start()
        try:
            time.sleep(0.2)
            assert checkpoints.rewind(ctx, session, cp).live
        finally:
            stop.set()
            reader.join()
        for name, fd in zip(names, fds, strict=True):
            assert os.pread(fd, size, 0) == _content(name, b"1", same_size=True)


def test_a_file_the_rewind_removes_reads_as_it_was_while_open(repo: Path, ctx: RepoContext) -> None:
    # As an open unlinked file does: what a process holds keeps its content (a name it looked
    # up before the kernel's invalidation reaches the same node).
    session = sessions.create(ctx, "held")
    mnt = Path(
        live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        ).mountpoint
    )
    cp = checkpoints.checkpoint(ctx, session, "none yet").checkpoint
    assert cp is not None
    contents = {"inline": b"small\n", "data": os.urandom(300_000)}
    for name, content in contents.items():
        (mnt / name).write_bytes(content)
    with contextlib.ExitStack() as stack:
        held = {n: stack.enter_context(open(mnt / n, "rb", buffering=0)) for n in contents}
        checkpoints.rewind(ctx, session, cp)
        assert not any((mnt / n).exists() for n in contents)
        for name, f in held.items():
            assert f.read() == contents[name]
    checkpoints.undo(ctx, session)
    assert all((mnt / n).read_bytes() == c for n, c in contents.items())


def test_rewind_inside_a_running_session(repo: Path, ctx: RepoContext, tmp_path: Path) -> None:
    names = [f"r{i}" for i in range(50)]
    write = "; ".join(f"printf '%s' {_content(n, b'1').decode()} > {n}" for n in names[:3])
    run(repo, "inside", write)
    session = sessions.resolve(ctx, "inside")
    log, stop, started = tmp_path / "log", tmp_path / "stop", tmp_path / "started"
    script = (
        "import pathlib, sys\n"
        f"names = {names[:3]!r}\n"
        f"good = {[[_content(n, b'1'), _content(n, b'2')] for n in names[:3]]!r}\n"
        f"stop, log = pathlib.Path({str(stop)!r}), open({str(log)!r}, 'w')\n"
        "passes = 0\n"
        "while not stop.exists():\n"
        "    for n, ok in zip(names, good):\n"
        "        d = pathlib.Path(n).read_bytes()\n"
        "        if d not in ok: log.write(f'{n} {d[:30]!r}\\n'); log.flush()\n"
        "    passes += 1\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "print(passes)\n"
    )
    cp = checkpoints.checkpoint(ctx, session, "v1").checkpoint
    assert cp is not None
    proc = subprocess.Popen(
        [*GITSESS, "run", "-s", "inside", "--", sys.executable, "-c", script],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert eventually(started.exists)
        mnt = Path(protocol.status(str(ctx.session_dir(session.id))).mountpoint)  # type: ignore[union-attr]
        for n in names[:3]:
            # whole or not at all for the reader: a rename over it
            (mnt / f"{n}.tmp").write_bytes(_content(n, b"2"))
            os.replace(mnt / f"{n}.tmp", mnt / n)
        time.sleep(0.5)
        checkpoints.rewind(ctx, session, cp)
        time.sleep(0.5)
    finally:
        stop.touch()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert int(out.strip()) > 0
    assert log.read_text() == ""


def test_kill_9_during_a_rewind_leaves_the_old_state_or_the_new(
    repo: Path, ctx: RepoContext
) -> None:
    session = sessions.create(ctx, "killed")
    names = [f"k{i}" for i in range(40)]
    outcomes = set()
    for delay in (0.0, 0.02, 0.05, 0.1, 0.2):
        status = live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        )
        mnt = Path(status.mountpoint)
        for n in names:
            (mnt / n).write_bytes(_content(n, b"1") * 20)
        cp = checkpoints.checkpoint(ctx, session, "v1").checkpoint
        assert cp is not None
        for n in names:
            (mnt / n).write_bytes(_content(n, b"2"))
        protocol.sync(str(ctx.session_dir(session.id)))
        pid = protocol.status(str(ctx.session_dir(session.id))).daemon_pid  # type: ignore[union-attr]
        worker = threading.Thread(target=_try_rewind, args=(ctx, session, cp))
        worker.start()
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        worker.join()
        assert eventually(lambda: _gone(str(ctx.session_dir(session.id))))
        live.unmount(ctx, session)
        status = live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        )
        mnt = Path(status.mountpoint)
        got = {n: (mnt / n).read_bytes() for n in names}
        old = all(got[n] == _content(n, b"2") for n in names)
        new = all(got[n] == _content(n, b"1") * 20 for n in names)
        assert old or new, {n: v[:20] for n, v in got.items()}
        outcomes.add("new" if new else "old")
        live.unmount(ctx, session)
    assert outcomes  # (which of the two each kill left depends on the machine's timing)


def _gone(session_dir: str) -> bool:
    try:
        return protocol.status(session_dir) is None
    except OSError:
        return False


def _try_rewind(ctx: RepoContext, session: sessions.Session, cp: int) -> None:
    # The daemon dies under it: the outcome is read from the view.
    with contextlib.suppress(Exception):
        checkpoints.rewind(ctx, session, cp)


def test_checkpoints_json_counts_changes(repo: Path, gs: InProcess) -> None:
    run(repo, "counts", "true")
    run(repo, "counts", "echo a > a; echo b > b; rm README.md; echo c >> src/app.py")
    gs.ok("checkpoint", "counts")
    cps = gs.json("checkpoints", "counts")["checkpoints"]
    assert (cps[-1]["added_paths"], cps[-1]["removed_paths"], cps[-1]["changed_paths"]) == (2, 1, 1)
    assert json.dumps(cps)  # plain data


def test_gc_keeps_what_the_retention_says(repo: Path, gs: InProcess) -> None:
    run(repo, "kept", "echo 0 > f")
    for i in range(1, 6):
        run(repo, "kept", f"echo {i} > f")
    assert len(gs.json("checkpoints", "kept")["checkpoints"]) == 6
    subprocess.run(["git", "config", "gitsess.checkpoints.keep", "2"], cwd=repo, check=True)
    gs.ok("gc")
    cps = gs.json("checkpoints", "kept")["checkpoints"]
    assert [c["checkpoint"] for c in cps] == [5, 6]
    assert gs.ok("fs", "kept", "cat", "f", "--at", "5") == "3\n"
    usage = gs.json("show", "kept")["usage"]["bytes_by_kind"]
    assert usage["checkpoints_bytes"] > 0 and usage["files_bytes"] > 0 and usage["log_bytes"] > 0
    subprocess.run(["git", "config", "gitsess.checkpoints.keep", "many"], cwd=repo, check=True)
    assert "gitsess.checkpoints.keep" in gs.fails("gc")


def test_gc_trims_a_mounted_session_through_its_daemon(
    repo: Path, ctx: RepoContext, gs: InProcess
) -> None:
    session = sessions.create(ctx, "up")
    live.keep_mounted(ctx, session, mountpoint=None, allow_other=False, read_only=False)
    daemon = protocol.status(str(ctx.session_dir(session.id)))
    assert daemon is not None
    for i in range(5):
        run(repo, "up", f"echo {i} > f; echo {i} > g{i}")
    assert len(gs.json("checkpoints", "up")["checkpoints"]) == 5
    subprocess.run(["git", "config", "gitsess.checkpoints.keep", "2"], cwd=repo, check=True)
    subprocess.run(["git", "config", "gitsess.log.maxEvents", "3"], cwd=repo, check=True)
    out = gs.ok("gc")
    assert "3 checkpoint(s)" in out
    still = protocol.status(str(ctx.session_dir(session.id)))
    assert still is not None and still.daemon_pid == daemon.daemon_pid
    assert [c["checkpoint"] for c in gs.json("checkpoints", "up")["checkpoints"]] == [4, 5]
    assert gs.ok("fs", "up", "cat", "f", "--at", "4") == "2\n"
    # the runs whose events went are summarised in the log
    log = gs.ok("log", "up")
    assert "earlier no longer kept (" in log and "write" in log
    # the daemon goes on logging, its known processes kept
    run(repo, "up", "echo after > h; echo more >> h")
    assert [e["path"] for e in map(json.loads, gs.ok("log", "up", "--json").splitlines())][-2:] == [
        "h",
        "h",
    ]
    gs.ok("rewind", "up", "4")
    assert gs.ok("fs", "up", "cat", "f") == "2\n"


def test_a_fork_keeps_the_checkpoints(repo: Path, gs: InProcess) -> None:
    big = "x" * 40_000
    run(repo, "orig", f"printf {big} > big")
    gs.ok("checkpoint", "orig")
    run(repo, "orig", "printf y > big")  # the data file of checkpoint 1 is saved aside
    gs.ok("fork", "orig", "copy")
    assert gs.ok("fs", "copy", "cat", "big", "--at", "2") == big
    gs.ok("rewind", "copy", "2")
    assert gs.ok("fs", "copy", "cat", "big") == big
    assert gs.ok("fs", "orig", "cat", "big") == "y"
    listed = gs.json("ls")
    by_name = {s["name"]: s for s in listed}
    assert by_name["copy"]["bytes_by_kind"]["checkpoints_bytes"] > 40_000


def test_a_fork_at_a_checkpoint_holds_its_state_git_included(repo: Path, gs: InProcess) -> None:
    big = "b" * 30_000
    run(
        repo,
        "src",
        f"echo one > f; mkdir d; echo x > d/x; printf {big} > big;"
        " git add -A; git commit -q -m first",
    )
    assert "Checkpoint 2" in gs.ok("checkpoint", "src", "-m", "first commit")
    later = (
        "echo two > f; rm -r d; printf small > big; echo new > g; chmod +x f;"
        " git add -A; git commit -q -m second; git checkout -q -b other"
    )
    run(repo, "src", later)
    show = "cat f d/x big; echo; ls; stat -c %a f; git log --format=%s; git branch --show-current"
    out = gs.ok("fork", "src", "past", "--at", "2", "--json")
    assert json.loads(out)["name"] == "past"
    # its history keeps the source's later state, as after any rewind: undo brings it back
    assert gs.ok("fs", "past", "cat", "f") == "one\n"
    gs.ok("undo", "past")
    assert gs.ok("fs", "past", "cat", "f") == "two\n"
    gs.ok("undo", "past")
    past = run(repo, "past", show + "; git status --short").stdout
    assert past == f"one\nx\n{big}\nREADME.md\nbig\nd\nf\nsrc\n644\nfirst\n" + _log_tail(repo) + (
        "main\n"
    )
    source = run(
        repo, "src", "cat f big; echo; ls; git log -1 --format=%s; git branch --show-current"
    )
    assert source.stdout == "two\nsmall\nREADME.md\nbig\nf\ng\nsrc\nsecond\nother\n"
    assert "no checkpoint 99" in gs.fails("fork", "src", "nope", "--at", "99")
    assert "nope" not in [s["name"] for s in gs.json("ls")]


def _log_tail(repo: Path) -> str:
    """The subjects of the real repository's commits, newest first."""
    return subprocess.run(
        ["git", "log", "--format=%s"], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def test_diff_between_checkpoints(repo: Path, gs: InProcess) -> None:
    run(repo, "d", "echo one > f; echo keep > k; mkdir -p new/dir")
    gs.ok("checkpoint", "d")
    run(repo, "d", "echo two > f; rm k; echo made > new/dir/m; chmod +x README.md")
    gs.ok("checkpoint", "d")
    names = gs.ok("diff", "d", "--from", "2", "--to", "3", "--name-status")
    assert names.splitlines() == ["P\tREADME.md", "M\tf", "D\tk", "A\tnew/dir/m"]
    patch = gs.ok("diff", "d", "--from", "2", "--", "f")
    assert "-one\n+two\n" in patch and "a/f" in patch
    # git's pathspecs, as the other diffs take them (globs, `.`, exclusions selected nothing)
    for spec, selected in (("new/*", ["A\tnew/dir/m"]), (".", names.splitlines())):
        assert (
            gs.ok("diff", "d", "--from", "2", "--to", "3", "--name-status", "--", spec).splitlines()
            == selected
        )
    excluded = gs.ok("diff", "d", "--from", "2", "--to", "3", "--name-status", "--", ":!k")
    assert excluded.splitlines() == ["P\tREADME.md", "M\tf", "A\tnew/dir/m"]
    code, _, err = call(gs.capsys, "diff", "d", "--to", "2")
    assert code == 2 and "--to needs --from" in err
    run(repo, "d", "printf x > \"$(printf 'two\\nlines')\"")
    odd = gs.ok("diff", "d", "--from", "3", "--name-status")
    assert odd.splitlines() == ['A\t"two\\nlines"']  # one line, quoted as git quotes it
    assert gs.ok("diff", "d", "--from", "3", "--name-status", "-z") == "A\0two\nlines\0"
    code, _, err = call(gs.capsys, "diff", "d", "-z")
    assert code == 2 and "-z goes with --name-only or --name-status" in err


def test_a_live_rewind_waits_for_writers_unless_forced(
    repo: Path, ctx: RepoContext, gs: InProcess
) -> None:
    session = sessions.create(ctx, "busy")
    mnt = Path(
        live.keep_mounted(
            ctx, session, mountpoint=None, allow_other=False, read_only=False
        ).mountpoint
    )
    (mnt / "held").write_text("old\n")
    (mnt / "other").write_text("old\n")
    gs.ok("checkpoint", "busy")
    (mnt / "held").write_text("new\n")
    with open(mnt / "other", "a"):  # open for writing, but the rewind does not change it
        with open(mnt / "held", "a"):
            err = gs.fails("rewind", "busy", "1")
            assert f"process {os.getpid()} holds" in err and "held" in err and "--force" in err
            assert (mnt / "held").read_text() == "new\n"
            # a checkpoint that is not there is said so, held writers or not
            for bad in ("0", "99", str(1 << 64)):
                assert f"no checkpoint {bad} in this session" in gs.fails("rewind", "busy", bad)
            gs.ok("rewind", "busy", "1", "--force")
            assert (mnt / "held").read_text() == "old\n"
        gs.ok("undo", "busy")  # `other` is held still, unchanged by this one
    assert (mnt / "held").read_text() == "new\n"


def test_rewind_of_some_paths(repo: Path, gs: InProcess) -> None:
    gs.ok("new", "p")
    gs.ok("mount", "p")  # (the runs join it: no daemon stops under the rewind's writes)
    run(repo, "p", "mkdir -p d; echo one > d/a; echo one > b; echo one > c")
    gs.ok("checkpoint", "p")
    run(repo, "p", "echo two > d/a; echo two > b; rm c; ln -s b l")
    gs.ok("rewind", "p", "2", "--", "d", "c")
    assert run(repo, "p", "cat d/a b c; ls").stdout == "one\ntwo\none\nREADME.md\nb\nc\nd\nl\nsrc\n"
    gs.ok("undo", "p")
    assert run(repo, "p", "cat d/a b; ls").stdout == "two\ntwo\nREADME.md\nb\nd\nl\nsrc\n"
    # `--` with nothing after it (an empty `-- $PATHS`) rewinds nothing: it rewound everything
    code, _, err = call(gs.capsys, "rewind", "p", "2", "--")
    assert code == 2 and "no PATHSPEC after `--`" in err
    assert run(repo, "p", "cat b").stdout == "two\n"
    # a missing CHECKPOINT is named so (it read "missing PATHSPEC...]")
    code, _, err = call(gs.capsys, "rewind", "p")
    assert code == 2 and "Error: missing CHECKPOINT\n" in err
    # the paths are git's pathspecs: a glob rewinds what it selects (it rewound nothing)
    gs.ok("rewind", "p", "2", "--", "d/*")
    assert run(repo, "p", "cat d/a b").stdout == "one\ntwo\n"


@pytest.mark.parametrize("mounted", [False, True], ids=["offline", "live"])
def test_a_rewind_brings_back_commits_a_gc_in_the_session_pruned(
    repo: Path, ctx: RepoContext, gs: InProcess, mounted: bool
) -> None:
    """A checkpoint keeps the store's object files (hard links in `kept/`), which a rewind to it
    links back: its commits are there whatever a `git gc` in the session removed since."""
    if mounted:
        gs.ok("new", "s")
        gs.ok("mount", "s")  # (the daemon checkpoints and rewinds)
    run(repo, "s", "echo c > c.txt && git add c.txt && git commit -qm kept-commit")
    head = run(repo, "s", "git rev-parse HEAD").stdout.strip()
    gs.ok("checkpoint", "s", "-m", "with the commit")
    cp = gs.json("checkpoints", "s")["checkpoints"][-1]["checkpoint"]
    run(
        repo,
        "s",
        "git reset -q --hard HEAD~1 && git reflog expire --expire=now --all"
        " && git gc -q --prune=now",
    )
    # the gc removed the commit from the session's store
    session_dir = ctx.session_dir(gs.json("show", "s")["id"])
    store = session_dir / "objects"
    assert not (store / head[:2] / head[2:]).exists()
    for idx in (store / "pack").glob("*.idx"):
        listed = subprocess.run(
            ["git", "show-index"], stdin=idx.open("rb"), capture_output=True, check=True
        )
        assert head.encode() not in listed.stdout
    gs.ok("rewind", "s", str(cp))
    inside = run(repo, "s", "git log -1 --format=%s && git fsck --no-dangling --no-progress")
    assert inside.stdout == "kept-commit\n"
    gs.ok("apply", "s", "--commit", "-m", "rewound")
    assert _log_tail(repo).splitlines()[0] == "kept-commit"
    # rm takes the store and what was kept with the session dir, and nothing its symlinks name
    gs.ok("rm", "s")
    assert not session_dir.exists()
    subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, check=True, capture_output=True)


def test_undo_and_rewind_inside_a_run(repo: Path, gs: InProcess) -> None:
    """Through the daemon: the state dir is read-only there (its mount lock failed: EROFS)."""
    gs.ok("new", "other")
    script = (
        f"{GS} checkpoint -m one >/dev/null; echo two > f; {GS} undo >/dev/null; cat f; "
        f"{GS} undo >/dev/null; cat f; {GS} rewind 99 2>&1; {GS} rewind 1 -s other 2>&1; "
        # a writer the rewind would change, seen in the run's own view
        f"exec 3>>f; {GS} rewind 2 2>&1; cat f; {GS} rewind 2 --force >/dev/null; ls"
    )
    out = run(repo, "in", f"echo one > f; {script}").stdout.splitlines()
    assert out[:3] == [
        "one",
        "two",
        "gitsess: no checkpoint 99 in this session (gitsess checkpoints lists them)",
    ]
    assert out[3] == (
        "gitsess: session other is not mounted, and inside a run only its daemon rewinds it"
    )
    assert "holds" in out[4] and out[4].endswith(
        "f open for writing, and the rewind changes it (--force rewinds anyway)"
    )
    assert out[5:] == ["two", "README.md", "f", "src"]
