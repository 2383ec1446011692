"""`gitsess log`: the audit log of real processes in real sessions, its filters and grouping."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext, discover
from gitsess.overlay import schema
from gitsess.services import timeline
from gitsess.services.sessions import create, resolve
from gitsess.services.viewwrite import view_writer
from tests.live_util import InProcess, call, eventually, follower, run

# One process per step, each announcing its pid: `exec` keeps it, so the pid a step prints is
# the pid that the daemon sees doing the step.
SCRIPT = (
    "echo $$; echo one > a.txt; "
    "sh -c 'echo $$; exec mv a.txt b.txt'; sh -c 'echo $$; exec rm README.md'; "
    "sh -c 'echo $$; exec mkdir dir dir/sub'"
)


def test_parse_since_durations_and_iso() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    def at(text: str) -> datetime:
        return datetime.fromtimestamp(timeline.parse_since(text, now) / 1e9, UTC)

    assert at("10m") == now - timedelta(minutes=10)
    assert at("2h30m") == now - timedelta(hours=2, minutes=30)
    assert at("1.5d") == now - timedelta(hours=36)
    assert at("1w") == now - timedelta(weeks=1)
    assert at("2024-04-30T08:00:00+00:00") == datetime(2024, 4, 30, 8, tzinfo=UTC)
    assert at("2024-04-30T08:00Z") == datetime(2024, 4, 30, 8, tzinfo=UTC)
    # Without a zone: the local time of whoever typed it.
    assert at("2024-04-30 08:00") == datetime(2024, 4, 30, 8).astimezone()
    # Past what a datetime or SQLite's integers hold: before or after every event.
    for far_back in ("99999999999d", "0001-01-01", "0001-01-01T00:00+00:00", "1900-01-01"):
        assert timeline.parse_since(far_back, now) == 0
    assert timeline.parse_since("9999-12-31T23:59:59", now) == (1 << 63) - 1
    for bad in ("yesterday", "10", "m", "-5m", ""):
        with pytest.raises(GitsessError, match="--since"):
            timeline.parse_since(bad, now)


def test_unknown_operation_is_refused() -> None:
    with pytest.raises(GitsessError, match="unknown operation frobnicate"):
        timeline.make_filter(ops=("write", "frobnicate"))


def test_wakeups_come_with_delta_writes_only(tmp_path: Path) -> None:
    stop = threading.Event()
    woke: list[float] = []
    written = 0.0
    # A minute between polls: any wake but the first comes from a file notification.
    for _ in timeline.wakeups(tmp_path, stop, poll=60):
        woke.append(time.monotonic())
        if len(woke) == 2:
            stop.set()
            continue
        for name in ("daemon.log", "mount.lock", "delta.db-wal"):
            time.sleep(0.3)
            (tmp_path / name).write_text(name)
        written = time.monotonic()
    assert len(woke) == 2
    assert 0 <= woke[1] - written < 2  # after delta.db-wal, not after daemon.log or mount.lock
    assert woke[1] - woke[0] > 0.8


def test_wakeups_poll_where_nothing_can_be_watched(tmp_path: Path) -> None:
    stop = threading.Event()
    woke = 0
    for _ in timeline.wakeups(tmp_path / "missing", stop, poll=0.01):
        woke += 1
        if woke == 3:
            stop.set()
    assert woke == 3


@pytest.mark.fuse
def test_log_records_each_process_and_its_command_line(repo: Path, gs: InProcess) -> None:
    done = run(repo, "exp", SCRIPT)
    shell, mv, rm, mkdir = (int(p) for p in done.stdout.split())
    expected = [
        ("create", "a.txt", None, shell),
        ("write", "a.txt", None, shell),
        ("rename", "a.txt", "b.txt", mv),
        ("unlink", "README.md", None, rm),
        ("mkdir", "dir", None, mkdir),
        ("mkdir", "dir/sub", None, mkdir),
    ]
    assert eventually(lambda: len(gs.lines("log", "exp")) == len(expected))
    rows = gs.lines("log", "exp")
    assert [(r["op"], r["path"], r["target"], r["pid"]) for r in rows] == expected
    commands = {r["pid"]: (r["process"], r["cmdline"]) for r in rows}
    assert commands[shell] == ("sh", f"sh -c {SCRIPT}")
    assert commands[mv] == ("mv", "mv a.txt b.txt")
    assert commands[rm] == ("rm", "rm README.md")
    assert commands[mkdir] == ("mkdir", "mkdir dir dir/sub")
    assert rows[1]["bytes"] == len("one\n")
    assert len({r["run"] for r in rows}) == 1 and rows[0]["run"] is not None
    times = [r["time_ns"] for r in rows]
    assert times == sorted(times)
    assert datetime.fromisoformat(rows[0]["time"]) > datetime.now(UTC) - timedelta(minutes=1)


@pytest.mark.fuse
def test_filters(repo: Path, gs: InProcess) -> None:
    done = run(repo, "exp", SCRIPT)
    mv = int(done.stdout.split()[1])
    run(repo, "exp", "echo two > dir/sub/x.txt; echo three > other.txt")
    assert eventually(lambda: len(gs.lines("log", "exp")) == 10)
    everything = gs.lines("log", "exp")
    first_run, second_run = everything[0]["run"], everything[-1]["run"]
    assert first_run != second_run

    ctx = discover(repo)
    session = resolve(ctx, "exp")

    def ops(**criteria: Any) -> list[tuple[str, str]]:
        found = timeline.timeline(ctx, session, timeline.make_filter(**criteria))
        return [(e.op, e.path) for g in found.groups for e in g.events]

    assert ops(ops=("rename",)) == [("rename", "a.txt")]
    assert ops(ops=("unlink", "rename")) == [("rename", "a.txt"), ("unlink", "README.md")]
    # A rename matches by its new path too; a directory matches what is below it.
    assert ops(path="b.txt") == [("rename", "a.txt")]
    assert ops(path="./dir/") == [
        ("mkdir", "dir"),
        ("mkdir", "dir/sub"),
        ("create", "dir/sub/x.txt"),
        ("write", "dir/sub/x.txt"),
    ]
    assert ops(path="*.txt", ops=("create",)) == [
        ("create", "a.txt"),
        ("create", "dir/sub/x.txt"),
        ("create", "other.txt"),
    ]
    assert ops(pid=mv) == [("rename", "a.txt")]
    assert len(ops(run_id=second_run)) == 4
    assert len(ops(since="1h")) == 10
    assert ops(since=(datetime.now(UTC) + timedelta(hours=1)).isoformat()) == []
    assert ops(path="nothing-here") == []
    assert len(ops(since="99999999999d")) == 10  # (an OverflowError, a traceback, before)
    assert ops(since="9999-12-31T23:59") == []
    # The same through the command line.
    assert [
        (r["op"], r["path"]) for r in gs.lines("log", "exp", "--op", "unlink", "--path", "*.md")
    ] == [("unlink", "README.md")]
    assert {r["run"] for r in gs.lines("log", "exp", "--run", str(first_run), "--since", "1h")} == {
        first_run
    }

    assert gs.fails("log", "exp", "--run", "9999") == "gitsess: session exp has no run 9999\n"
    code, _, err = call(gs.capsys, "log", "exp", "--pid", str(1 << 64))
    assert code == 2 and "--pid" in err and "Traceback" not in err
    code, _, err = call(gs.capsys, "log", "exp", "--op", "explode")
    assert code == 2  # a usage error
    assert "unknown operation explode" in err


@pytest.mark.fuse
def test_human_timeline_groups_by_run(repo: Path, gs: InProcess) -> None:
    run(repo, "exp", "echo one > first.txt")
    run(repo, "exp", "true")
    run(repo, "exp", "mv first.txt second.txt")
    assert eventually(lambda: len(gs.lines("log", "exp")) == 3)
    out = gs.ok("log", "exp")
    headers = [line for line in out.splitlines() if line.startswith("run ")]
    assert len(headers) == 3
    assert "sh -c echo one > first.txt" in headers[0] and "2 changes" in headers[0]
    assert "sh -c true" in headers[1] and "0 changes" in headers[1] and "exit 0" in headers[1]
    assert "1 change" in headers[2]
    assert "first.txt → second.txt" in out
    # Asking for particular changes leaves out the runs without any.
    filtered = gs.ok("log", "exp", "--op", "rename")
    assert [line for line in filtered.splitlines() if line.startswith("run ")] == [headers[2]]
    assert gs.ok("log", "exp", "--op", "chown") == "Nothing matches in session exp.\n"


@pytest.mark.fuse
def test_a_write_without_the_daemon_is_in_the_log_as_one_through_the_mount(
    ctx: RepoContext, gs: InProcess
) -> None:
    """`restore` and `discard` write into an unmounted session's delta themselves
    (`services/viewwrite.py`): the log shows their changes as the daemon shows the same
    writer's changes through the mount."""
    session = create(ctx, "exp")

    def logged(since: int) -> list[tuple[str, str, int | None, str | None, int | None]]:
        # (a chmod only through the mount: the mount's writer sets the mode after the umask)
        found = timeline.timeline(ctx, session, timeline.make_filter())
        events = [e for g in found.groups for e in g.events if e.id > since]
        return [(e.op, e.path, e.pid, e.process, e.run_id) for e in events if e.op != "chmod"]

    me = os.getpid()
    comm = Path(f"/proc/{me}/comm").read_text().strip()
    with view_writer(ctx, session, session.worktree) as writer:
        writer.put_file("made.txt", (b"one\n", b"two\n"), 0o644)
        writer.remove("README.md")
    offline = logged(0)
    assert offline == [
        ("create", "made.txt", me, comm, None),
        ("write", "made.txt", me, comm, None),
        ("unlink", "README.md", me, comm, None),
    ]
    assert gs.lines("log", "exp")[1]["bytes"] == len(b"one\ntwo\n")

    gs.ok("mount", "exp")
    last = timeline.timeline(ctx, session, timeline.make_filter()).last_id
    with view_writer(ctx, session, session.worktree) as writer:
        writer.put_file("mounted.txt", (b"one\n", b"two\n"), 0o644)
        writer.remove("made.txt")
    gs.ok("umount", "exp")
    assert logged(last) == [
        ("create", "mounted.txt", me, comm, None),
        ("write", "mounted.txt", me, comm, None),
        ("unlink", "made.txt", me, comm, None),
    ]


def test_log_of_a_session_that_never_ran(ctx: RepoContext, gs: InProcess) -> None:
    create(ctx, "idle")
    assert gs.ok("log", "idle") == "No activity in session idle yet.\n"
    assert gs.ok("log", "idle", "--json") == ""
    # Reading never creates delta.db.
    assert not any(ctx.sessions_dir.glob("*/delta.db"))


@pytest.mark.fuse
def test_follow_prints_changes_as_they_happen(repo: Path) -> None:
    run(repo, "exp", "echo before > before.txt")
    with follower(repo, "log", "exp", "--follow", "--json") as f:
        assert eventually(lambda: len(f.records()) == 2)
        run(repo, "exp", "echo after > after.txt; rm before.txt")
        assert eventually(lambda: len(f.records()) == 5)
        assert f.stop() == 0
    assert [(r["op"], r["path"]) for r in f.records()] == [
        ("create", "before.txt"),
        ("write", "before.txt"),
        ("create", "after.txt"),
        ("write", "after.txt"),
        ("unlink", "before.txt"),
    ]
    ids = [r["event"] for r in f.records()]
    assert ids == sorted(set(ids))


def _fill(ctx: RepoContext, session_id: str, count: int) -> None:
    """`count` events of 50 processes, as the daemon writes them, without a mount."""
    conn = schema.connect(str(ctx.session_dir(session_id) / "delta.db"))
    start = time.time_ns() - count * 1_000_000
    with conn:
        conn.executemany(
            "INSERT INTO processes (id, pid, name, cmdline) VALUES (?, ?, ?, ?)",
            [(i + 1, 1000 + i, "tool", f"tool --job {i}") for i in range(50)],
        )
        conn.executemany(
            "INSERT INTO events (time_ns, op, path, target, bytes, pid, process, role, run_id)"
            " VALUES (?, ?, ?, NULL, ?, ?, ?, NULL, NULL)",
            [
                (
                    start + i * 1_000_000,
                    "write" if i % 3 else "create",
                    f"src/d{i % 100}/f{i}.txt",
                    i,
                    1000 + i % 50,
                    1 + i % 50,
                )
                for i in range(count)
            ],
        )
    conn.close()


def test_ten_thousand_events(ctx: RepoContext, gs: InProcess) -> None:
    session = create(ctx, "busy")
    _fill(ctx, session.id, 10_000)
    started = time.perf_counter()
    everything = timeline.timeline(ctx, session, timeline.make_filter())
    query = time.perf_counter() - started
    assert sum(len(g.events) for g in everything.groups) == 10_000
    started = time.perf_counter()
    some = timeline.timeline(ctx, session, timeline.make_filter(path="src/d7", ops=("create",)))
    filtered = time.perf_counter() - started
    assert sum(len(g.events) for g in some.groups) == 33
    assert gs.ok("log", "busy").count("tool --job") == 10_000
    assert len(gs.lines("log", "busy")) == 10_000
    assert query < 1.0 and filtered < 0.2
