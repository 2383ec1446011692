"""Everyday use (issue 40): a readable `ls`, completion, hints, usage errors, light imports."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
from collections import deque
from pathlib import Path

import pytest
from click.shell_completion import ShellComplete

from gitsess.cli.group import cli
from gitsess.cli.table import Cell, Column, render, width_of
from gitsess.suggest import did_you_mean, edit_distance
from tests.util import GITSESS, git, gitsess

LONG_NAME = "fix-login-timeout-in-oauth-flow"
LONG_TITLE = "Fix the login timeout in the OAuth flow when the identity provider is slow to answer"


def on_terminal(cwd: Path, *args: str, columns: int = 80) -> str:
    """The program's output on a pseudo-terminal `columns` wide, as a user sees it."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)}
    proc = subprocess.Popen(
        [*GITSESS, *args], cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower
    )
    # The follower stays open here until the program has ended and all it wrote is read:
    # once its last descriptor closes, a read of the leader may fail (EIO) before the
    # program's last writes have reached it.
    chunks = []
    try:
        while True:
            if select.select([leader], [], [], 0.05)[0]:
                chunks.append(os.read(leader, 4096))
            elif proc.poll() is not None:
                break
    finally:
        os.close(follower)
        os.close(leader)
        proc.wait(timeout=60)
    assert proc.returncode == 0, b"".join(chunks)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_ls_at_80_columns_never_cuts_what_a_user_types(repo: Path) -> None:
    assert gitsess(repo, "new", LONG_NAME, "-t", LONG_TITLE).returncode == 0
    assert gitsess(repo, "new", "short", "--worktree", "-t", LONG_TITLE).returncode == 0
    ids = {row["name"]: row["id"] for row in json.loads(gitsess(repo, "ls", "--json").stdout)}
    out = on_terminal(repo, "ls")
    lines = out.splitlines()
    # The headings' paths are printed whole, to be copied; the tables fit.
    rows = [line for line in lines if line.lstrip().startswith(("#", "-"))]
    assert len(rows) == 4 and all(width_of(line) <= 80 for line in rows), out
    header = next(line for line in lines if line.lstrip().startswith("#"))
    for column in ("NAME", "ID", "STATE", "CHANGES"):
        assert column in header
    mine = next(line for line in lines if LONG_NAME in line)
    assert mine.split()[:3] == ["-2", LONG_NAME, ids[LONG_NAME][:8]]
    other = next(line for line in lines if " short " in line)
    assert other.split()[:3] == ["-1", "short", ids["short"][:8]]
    assert LONG_TITLE not in out  # the title gave up its room first
    assert "idle" in mine and "none" in mine


def test_ls_columns_shrink_title_first_then_drop_it() -> None:
    columns = [Column("NAME"), Column("BRANCH", shrink=2, minimum=6), Column("TITLE", shrink=1)]
    rows = [[Cell("a-name"), Cell("a-long-branch-name"), Cell("t" * 40)]]
    wide = render(columns, rows, None)
    assert wide[1] == "a-name  a-long-branch-name  " + "t" * 40
    narrow = render(columns, rows, 40)
    assert narrow[1] == "a-name  a-long-branch-name  " + "t" * 11 + "…"
    tight = render(columns, rows, 20)
    assert tight[1] == "a-name  a-long-bran…"  # TITLE dropped, BRANCH cut, NAME whole
    assert render(columns, rows, 5)[1].startswith("a-name")


@pytest.mark.fuse
def test_ls_counts_real_changes_and_says_files_and_commits(repo: Path) -> None:
    rewrite = "cat README.md > /tmp/.x$$ && cat /tmp/.x$$ > README.md && rm /tmp/.x$$"
    assert gitsess(repo, "run", "-s", "same", "--", "sh", "-c", rewrite).returncode == 0
    changed = "echo more >> README.md && echo new > added.txt"
    assert gitsess(repo, "run", "-s", "two", "--", "sh", "-c", changed).returncode == 0
    rows = {r["name"]: r for r in json.loads(gitsess(repo, "ls", "--json").stdout)}
    assert rows["same"]["changed_files"] == 0  # touched, but the bytes are the worktree's
    assert rows["two"]["changed_files"] == 2
    out = gitsess(repo, "ls").stdout
    assert "2 files" in next(line for line in out.splitlines() if " two " in line)
    assert "none" in next(line for line in out.splitlines() if " same " in line)


def test_ls_shows_how_far_the_branch_moved(repo: Path) -> None:
    assert gitsess(repo, "new", "early").returncode == 0
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    [row] = json.loads(gitsess(repo, "ls", "--json").stdout)
    assert row["behind"] == 1
    assert "main ↓1" in gitsess(repo, "ls").stdout


def test_ls_in_a_bare_repository_does_not_suggest_what_fails_there(tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    done = gitsess(bare, "ls")
    assert done.returncode == 0
    assert "Create one: gitsess new" not in done.stdout
    assert "--worktree" in done.stdout


# ----------------------------------------------------------------------------- completion


def completions(args: list[str], incomplete: str) -> list[str]:
    complete = ShellComplete(cli, {}, "gitsess", "_GITSESS_COMPLETE")
    return [c.value for c in complete.get_completions(args, incomplete)]


def test_completion_of_sessions_archives_agents_and_roles(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("alpha", "alpine", "beta"):
        assert gitsess(repo, "new", name).returncode == 0
    monkeypatch.chdir(repo)
    assert completions(["show"], "al") == ["alpha", "alpine"]
    assert completions(["diff", "-s"], "b") == ["beta"]
    assert completions(["rename"], "") == ["alpha", "alpine", "beta"]
    assert completions(["rename", "alpha"], "") == []  # NEW_NAME: nothing to offer
    assert "alpha" in completions(["kv"], "a")
    assert completions(["kv"], "g") == ["get"]
    assert "claude" in completions(["run", "--agent"], "cl")
    assert completions(["stop", "alpha", "--role"], "") == []
    assert gitsess(repo, "rm", "beta").returncode == 0
    assert completions(["restore"], "") == []  # nothing was unapplied: no archive
    git(repo, "remote", "add", "origin", str(repo))
    git(repo, "remote", "add", "upstream", str(repo))
    assert completions(["push"], "") == ["alpha", "alpine", "origin", "upstream"]
    assert completions(["push", "alpha"], "u") == ["upstream"]
    assert completions(["pull", "alpha"], "o") == ["origin"]
    assert completions(["ls", "--remote"], "") == ["origin", "upstream"]


def test_completion_command_prints_each_shells_script(repo: Path) -> None:
    for shell, marker in (
        ("bash", "complete -o"),
        ("zsh", "compdef"),
        ("fish", "complete --no-files"),
    ):
        done = gitsess(repo, "completion", shell)
        assert done.returncode == 0
        assert marker in done.stdout and "_GITSESS_COMPLETE" in done.stdout
    assert gitsess(repo, "completion", "tcsh").returncode == 2


# ----------------------------------------------------------------------------- errors


def test_did_you_mean_by_edit_distance() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert did_you_mean("fix-logn", ["fix-login", "other"]) == "; did you mean 'fix-login'?"
    assert did_you_mean("zzz", ["fix-login"]) == ""


def test_unknown_session_and_command_suggest_a_close_name(repo: Path) -> None:
    assert gitsess(repo, "new", LONG_NAME).returncode == 0
    done = gitsess(repo, "show", "fix-login-timeout-in-oauth-flw")
    assert done.returncode == 1
    assert f"did you mean '{LONG_NAME}'?" in done.stderr
    done = gitsess(repo, "mont")
    assert done.returncode == 2 and "did you mean 'mount'?" in done.stderr


@pytest.mark.fuse
def test_run_names_a_close_session_when_it_creates_one(repo: Path) -> None:
    assert gitsess(repo, "new", "experiment").returncode == 0
    done = gitsess(repo, "run", "-s", "experimnt", "--", "true")
    assert done.returncode == 0
    assert "new session experimnt" in done.stderr
    assert "did you mean 'experiment'?" in done.stderr


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["rename", "exp"], "NEW_NAME"),
        (["title", "exp"], "TEXT"),
        (["fork", "exp"], "NEW_NAME"),
        (["rename"], "[SESSION] NEW_NAME"),
    ],
)
def test_a_missing_second_argument_is_a_usage_error(
    repo: Path, args: list[str], missing: str
) -> None:
    assert gitsess(repo, "new", "exp").returncode == 0
    done = gitsess(repo, *args)
    assert done.returncode == 2
    assert f"missing {missing}" in done.stderr


@pytest.mark.fuse
def test_run_worktree_of_a_session_bound_to_this_worktree_is_refused(repo: Path) -> None:
    """--worktree on a session that exists went unheeded: the run was in the session's
    worktree, not in one of its own; resuming a session that has one is as before."""
    assert gitsess(repo, "new", "exp").returncode == 0
    done = gitsess(repo, "run", "-s", "exp", "--worktree", "--", "touch", "made")
    assert done.returncode == 1
    assert done.stderr == (
        f"gitsess: session exp exists, in {repo}, not in a worktree of its own: --worktree makes"
        " one only for a new session; leave it out to run in exp, or give a new name\n"
    )
    assert gitsess(repo, "diff", "exp", "--name-only").stdout == ""
    for _ in range(2):
        again = gitsess(repo, "run", "-s", "own", "--worktree", "--", "pwd")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().endswith("/worktrees/own")


def test_inside_a_session_the_one_word_is_the_new_name(repo: Path) -> None:
    assert gitsess(repo, "new", "exp").returncode == 0
    done = gitsess(repo, "rename", "renamed", env={"GITSESS_SESSION": "exp"})
    assert done.returncode == 0, done.stderr
    assert "renamed" in gitsess(repo, "ls").stdout


@pytest.mark.parametrize("args", [["--since", "yesterday-ish"], ["--op", "frobnicate"]])
def test_bad_log_filters_are_usage_errors(repo: Path, args: list[str]) -> None:
    assert gitsess(repo, "new", "exp").returncode == 0
    done = gitsess(repo, "log", "exp", *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- help


def test_help_at_80_columns_cuts_no_summary_and_every_command_has_examples(
    repo: Path,
) -> None:
    done = gitsess(repo, "--help", env={"COLUMNS": "80"})
    listed = done.stdout.split("Commands:")[1].splitlines()
    assert listed and not any(line.endswith("...") for line in listed), done.stdout
    from gitsess.cli.group import COMMANDS

    for name, (_, summary) in COMMANDS.items():
        if summary is None:
            continue
        shown = gitsess(repo, name, "--help").stdout
        assert "Examples:\n    gitsess " in shown or "Examples:\n    eval " in shown, name


# ----------------------------------------------------------------------------- mount, diff


@pytest.mark.fuse
def test_mount_refuses_a_directory_with_files_and_a_second_place(
    repo: Path, tmp_path: Path
) -> None:
    assert gitsess(repo, "new", "exp").returncode == 0
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me\n")
    done = gitsess(repo, "mount", "exp", str(full))
    assert done.returncode == 1 and "is not empty" in done.stderr and "--force" in done.stderr
    assert (full / "mine.txt").read_text() == "keep me\n"
    first, other = tmp_path / "first", tmp_path / "other"
    first.mkdir()
    other.mkdir()
    try:
        assert gitsess(repo, "mount", "exp", str(first)).returncode == 0
        again = gitsess(repo, "mount", "exp", str(other))
        assert again.returncode == 1
        assert f"mounted at {first}" in again.stderr
        assert list(other.iterdir()) == []
        assert gitsess(repo, "mount", "exp", str(first)).returncode == 0  # where it is: fine
    finally:
        gitsess(repo, "umount", "exp")


@pytest.mark.fuse
def test_diff_on_a_terminal_respects_no_color(repo: Path) -> None:
    assert (
        gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo more >> README.md").returncode
        == 0
    )
    out = on_terminal(repo, "diff", "exp")
    assert "+more" in out and "\x1b[" not in out


@pytest.mark.fuse
def test_discard_all_drops_the_sessions_commits_and_changes(repo: Path) -> None:
    work = "echo more >> README.md && git commit -qam inside && echo again >> README.md"
    assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", work).returncode == 0
    plain = gitsess(repo, "discard", "exp")  # not a terminal: it asks, so it refuses
    assert plain.returncode == 1 and "asks first" in plain.stderr
    asked = gitsess(repo, "discard", "exp", "--commits")
    assert asked.returncode == 1 and "asks first" in asked.stderr
    assert "commit " in asked.stdout and "inside" in asked.stdout  # what it would drop
    done = json.loads(gitsess(repo, "discard", "exp", "--all", "-y", "--json").stdout)
    assert len(done["dropped_commits"]) == 1 and "README.md" in done["dropped"]
    [row] = json.loads(gitsess(repo, "ls", "--json").stdout)
    assert (row["changed_files"], row["commits"]) == (0, 0)
    assert gitsess(repo, "diff", "exp").stdout == ""


# ----------------------------------------------------------------------------- log


def test_git_files_fold_into_one_line_per_git_command() -> None:
    from gitsess.services.gitfold import GitActivity, excluded, fold
    from gitsess.services.timeline import Event

    def event(n: int, path: str, pid: int, cmdline: str) -> Event:
        return Event(n, n, "write", path, None, 1, pid, "x", cmdline, None, 1)

    events = [
        event(1, "README.md", 10, "sh -c edit"),
        event(2, ".git/index.lock", 11, "git commit -q -m x"),
        event(3, ".git/HEAD.lock", 11, "git commit -q -m x"),
        event(4, ".git/index.lock", 11, "git commit -q -m x"),
        event(5, "notes.txt", 10, "sh -c edit"),
    ]
    folded = fold(events)
    assert [type(i).__name__ for i in folded] == ["Event", "GitActivity", "Event"]
    activity = folded[1]
    assert isinstance(activity, GitActivity)
    assert (activity.command, activity.files) == ("git commit", 2)
    assert excluded("build/out/a.o", ["build"]) and excluded("x.log", ["*.log"])
    assert not excluded("src/build.py", ["build"])
    # git's own options before the subcommand are not the subcommand
    configured = fold([event(1, ".git/HEAD", 12, "/usr/bin/git -c user.name=a -C . commit")])
    assert isinstance(configured[0], GitActivity) and configured[0].command == "git commit"


def test_a_watch_folds_each_git_command_once_across_batches() -> None:
    from gitsess.cli.inspect_cmds import _add_folded
    from gitsess.services.feed import Change
    from gitsess.services.gitfold import Folder, GitActivity
    from gitsess.services.timeline import Drift, Event

    def event(n: int, path: str) -> Event:
        return Event(n, n, "write", path, None, 1, 11, "git", "git commit -m x", None, 1)

    folder = Folder()
    batch: list[Change] = [event(1, ".git/index.lock"), Drift("README.md", 1)]
    first = folder.fold(batch)
    assert isinstance(first[0], GitActivity) and isinstance(first[1], Drift)
    assert not first[0].more
    later = folder.fold([event(2, ".git/HEAD.lock"), event(3, ".git/HEAD"), event(4, "a.txt")])
    assert later[1] == event(4, "a.txt")
    assert isinstance(later[0], GitActivity) and (later[0].more, later[0].files) == (True, 2)
    # a live watch keeps one line per command, counting every batch
    recent: deque[Change | GitActivity] = deque()
    for item in [*first, *later]:
        _add_folded(recent, item)
    assert len(recent) == 3 and isinstance(recent[0], GitActivity) and recent[0].files == 3


@pytest.mark.fuse
def test_log_hides_gits_own_files_unless_asked(repo: Path) -> None:
    work = "echo more >> README.md && echo t > tmp.log && git commit -qam inside"
    assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", work).returncode == 0
    text = gitsess(repo, "log", "exp").stdout
    assert "git commit:" in text and "in .git" in text
    assert ".git/index" not in text and "README.md" in text
    assert ".git/" in gitsess(repo, "log", "exp", "--git").stdout
    kept = gitsess(repo, "log", "exp", "--exclude", "*.log", "--json").stdout.splitlines()
    assert {json.loads(line)["path"] for line in kept} == {"README.md"}
    paths = [
        json.loads(line)["path"]
        for line in gitsess(repo, "log", "exp", "--json").stdout.splitlines()
    ]
    assert "README.md" in paths and not any(p.startswith(".git") for p in paths)
    shown = json.loads(gitsess(repo, "show", "exp", "--json").stdout)
    assert [c["subject"] for c in shown["own_commits"]] == ["inside"]
    commit = shown["own_commits"][0]["commit"]
    assert gitsess(repo, "log", "exp", "--commits").stdout == f"{commit[:10]} inside\n"
    listed = gitsess(repo, "log", "exp", "--commits", "--json").stdout
    assert [json.loads(line) for line in listed.splitlines()] == [
        {"commit": commit, "subject": "inside"}
    ]
    assert gitsess(repo, "log", "exp", "--commits", "--follow").returncode == 2
    assert gitsess(repo, "new", "other").returncode == 0
    none = gitsess(repo, "log", "other", "--commits").stdout
    assert none == "Session other has no commits of its own.\n"


# ----------------------------------------------------------------------------- progress


class Recorder:
    """A progress reporter that keeps what it was told."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.done: dict[int, int] = {}

    def start(self, label: str, total: int) -> object:
        self.labels.append(label)
        return len(self.labels) - 1

    def advance(self, handle: object, done: int) -> None:
        assert isinstance(handle, int)
        self.done[handle] = done

    def finish(self, handle: object) -> None:
        pass


@pytest.mark.fuse
def test_restore_of_a_big_file_reports_progress_and_passes_are_named(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitsess import progress
    from gitsess.git.location import discover
    from gitsess.git.scratch import BIG_FILE
    from gitsess.services import apply, archives, sessions

    size = BIG_FILE + (1 << 20)
    make = f"head -c {size} /dev/urandom > big.bin"
    assert gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", make).returncode == 0
    monkeypatch.chdir(repo)
    ctx = discover()
    seen = Recorder()
    with progress.reporting(seen):
        apply.diff(ctx, sessions.resolve(ctx, "exp"), [])
    assert "hashing big.bin" in seen.labels
    assert gitsess(repo, "rm", "exp").returncode == 0
    seen = Recorder()
    with progress.reporting(seen):
        archives.restore(ctx, "exp")
    index = seen.labels.index("restoring big.bin")
    assert seen.done[index] == size


@pytest.mark.fuse
def test_an_apply_over_the_worktrees_own_change_says_what_to_do(repo: Path) -> None:
    assert (
        gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo mine >> README.md").returncode
        == 0
    )
    (repo / "README.md").write_text("theirs\n")
    done = gitsess(repo, "apply", "exp", "--worktree")
    assert done.returncode == 1
    assert "conflict: README.md" in done.stderr
    assert "commit or stash them" in done.stderr and "--force" in done.stderr
    assert (repo / "README.md").read_text() == "theirs\n"  # nothing lost
