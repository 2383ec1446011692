"""`gitsess watch`: the live feed of a session's changes, as JSON lines and as text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gitsess.git.repo import RepoContext
from gitsess.services.sessions import create
from tests.live_util import eventually, follower, run
from tests.util import gitsess

pytestmark = pytest.mark.fuse

SCRIPT = (
    "echo $$; echo one > a.txt; sh -c 'echo $$; exec mv a.txt b.txt'; "
    "sh -c 'echo $$; exec rm before.txt'; mkdir d; ln -s ../b.txt d/link; echo two >> b.txt"
)
EXPECTED = [
    ("create", "a.txt", None),
    ("write", "a.txt", None),
    ("rename", "a.txt", "b.txt"),
    ("unlink", "before.txt", None),
    ("mkdir", "d", None),
    ("symlink", "d/link", "../b.txt"),
    ("write", "b.txt", None),
]


def test_json_lines_for_a_scripted_sequence(repo: Path) -> None:
    run(repo, "exp", "echo before > before.txt")
    with follower(repo, "watch", "exp", "--json") as watch:
        watch.wait_for_stderr("watching session exp")
        shell, mv, rm = (int(p) for p in run(repo, "exp", SCRIPT).stdout.split())
        assert eventually(lambda: len(watch.records()) >= len(EXPECTED))
        assert watch.stop() == 0
    records = watch.records()
    # Only what happened after the watch started: `before.txt`'s creation is `log`'s.
    assert [(r["op"], r["path"], r["target"]) for r in records] == EXPECTED
    by_op = {r["op"]: r for r in records}
    assert (by_op["create"]["pid"], by_op["create"]["process"]) == (shell, "sh")
    assert (by_op["rename"]["pid"], by_op["rename"]["cmdline"]) == (mv, "mv a.txt b.txt")
    assert (by_op["unlink"]["pid"], by_op["unlink"]["cmdline"]) == (rm, "rm before.txt")
    assert records[1]["bytes"] == len("one\n")
    runs = {r["run"] for r in records}
    assert len(runs) == 1 and None not in runs
    # Each change arrives within a few daemon commits (100 ms each) of happening.
    delays = [(at - r["time_ns"]) / 1e9 for at, r in zip(watch.arrivals, records, strict=True)]
    assert max(delays) < 5, delays


def test_drift_shows_in_the_feed(repo: Path, ctx: RepoContext) -> None:
    run(repo, "exp", "echo session > README.md")
    done = gitsess(repo, "mount", "exp")
    assert done.returncode == 0, done.stderr
    try:
        with follower(repo, "watch", "exp", "--json") as watch:
            watch.wait_for_stderr("watching session exp")
            (repo / "src" / "app.py").write_text("print('not the session's')\n")
            (repo / "README.md").write_text("real edit\n")
            assert eventually(lambda: any(r["op"] == "drift" for r in watch.records()))
            assert watch.stop() == 0
        assert [r["path"] for r in watch.records() if r["op"] == "drift"] == ["README.md"]
    finally:
        gitsess(repo, "umount", "exp")


def test_text_lines_when_piped(repo: Path, ctx: RepoContext) -> None:
    create(ctx, "exp")
    with follower(repo, "watch", "exp") as watch:
        watch.wait_for_stderr("watching session exp")
        run(repo, "exp", "mkdir made")
        assert eventually(lambda: any("mkdir  made" in line for line in watch.lines))
        assert watch.stop() == 0
    assert "mkdir (" in "".join(watch.lines)


def test_the_watch_ends_when_the_session_is_removed(repo: Path, ctx: RepoContext) -> None:
    create(ctx, "exp")
    with follower(repo, "watch", "exp", "--json") as watch:
        watch.wait_for_stderr("watching session exp")
        assert gitsess(repo, "rm", "exp").returncode == 0
        assert watch.proc.wait(timeout=30) == 1
        watch.wait_for_stderr("gitsess: session exp was removed")


def test_watch_needs_a_session(repo: Path) -> None:
    done = gitsess(repo, "watch", "ghost")
    assert done.returncode == 1
    assert done.stderr.startswith("gitsess: no session 'ghost'")


def test_git_commands_fold_into_one_line_each_unless_asked(repo: Path, ctx: RepoContext) -> None:
    create(ctx, "exp")
    work = "echo more >> README.md && git -c user.name=a -c user.email=a@b commit -qam inside"
    with (
        follower(repo, "watch", "exp") as folded,
        follower(repo, "watch", "exp", "--git") as each,
        follower(repo, "log", "exp", "--follow") as log,
    ):
        folded.wait_for_stderr("watching session exp")
        each.wait_for_stderr("watching session exp")
        run(repo, "exp", work)
        assert eventually(lambda: any("git commit: " in line for line in folded.lines))
        assert eventually(lambda: any(".git/index.lock" in line for line in each.lines))
        assert eventually(lambda: any("git commit: " in line for line in log.lines))
        assert folded.stop() == 0 and each.stop() == 0
    for text in ("".join(folded.lines), "".join(log.lines)):
        # One line for the command, and "more" where its later changes came in a later batch
        assert len(re.findall(r"git commit: [0-9]+ files? in .git", text)) == 1, text
        assert ".git/" not in text and "README.md" in text
