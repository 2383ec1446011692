"""The git hooks end to end: real git commands in a repository that already has hooks of its own
(under `core.hooksPath`), gitsess's hooks installed over them."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.git.repo import discover
from gitsess.services import hooks
from tests.live_util import eventually
from tests.sweep_util import (
    HOOK_COMMAND,
    archived,
    archives,
    assert_clean,
    run_in,
    session,
    sessions_of,
    stop_everything,
)
from tests.util import commit, git, gitsess, make_repo

ROOT = Path(__file__).resolve().parents[2]

# The user's own hooks: each appends its name, arguments and input to a log; the
# reference-transaction one refuses any update of refs/heads/blocked, as hooks may.
USER_HOOK = """#!/bin/sh
{read}
printf '%s %s\\n' {name} "$*" >>{log}
{write}
"""
ABORTING = """
case $input in *refs/heads/blocked*) [ "$1" = prepared ] && exit 1 ;; esac
exit 0
"""


def _user_hook(name: str, log: Path) -> str:
    text = USER_HOOK.format(
        name=name,
        log=log,
        read="input=$(cat)" if name in hooks.STDIN_HOOKS else "",
        write=f'printf "%s\\n" "$input" >>{log}' if name in hooks.STDIN_HOOKS else "",
    )
    return text + (ABORTING if name == "reference-transaction" else "")


@pytest.fixture
def user_hooks(tmp_path: Path) -> tuple[Path, Path]:
    """A hooks directory holding the user's hooks, and the log they write."""
    directory = tmp_path / "user-hooks"
    directory.mkdir()
    log = tmp_path / "user-hooks.log"
    for name in hooks.HOOKS:
        (directory / name).write_text(_user_hook(name, log))
        (directory / name).chmod(0o755)
    return directory, log


@pytest.fixture
def repo(repo: Path, user_hooks: tuple[Path, Path]) -> Iterator[Path]:
    """The shared repository with `core.hooksPath` set to the user's hooks and gitsess's hooks
    installed over them; every daemon of it stopped afterwards, even when the test failed."""
    git(repo, "config", "core.hooksPath", str(user_hooks[0]))
    done = gitsess(repo, "hooks", "install", "--command", HOOK_COMMAND)
    assert done.returncode == 0, done.stderr
    try:
        yield repo
    finally:
        stop_everything(repo)


def test_install_keeps_the_users_hooks_and_runs_them_first(
    repo: Path, user_hooks: tuple[Path, Path]
) -> None:
    directory, log = user_hooks
    for name in hooks.HOOKS:
        assert hooks.MARKER in (directory / name).read_text()
        assert (directory / (name + hooks.USER_SUFFIX)).read_text() == _user_hook(name, log)
    again = gitsess(repo, "hooks", "install", "--json", "--command", HOOK_COMMAND)
    assert [h["outcome"] for h in json.loads(again.stdout)["hooks"]] == ["unchanged"] * 5
    assert not list(directory.glob("*.gitsess-user.gitsess-user"))

    git(repo, "checkout", "-q", "-b", "side")
    head = git(repo, "rev-parse", "HEAD")
    assert f"post-checkout {head} {head} 1" in log.read_text()
    git(repo, "commit", "-q", "--allow-empty", "-m", "two")
    text = log.read_text()
    assert "post-commit \n" in text
    assert f"{head} {git(repo, 'rev-parse', 'HEAD')} refs/heads/side" in text  # the input
    # The user's hook can still abort a ref update, as without gitsess.
    refused = subprocess.run(["git", "branch", "blocked"], cwd=repo, capture_output=True)
    assert refused.returncode != 0
    assert git(repo, "branch", "--list", "blocked") == ""

    removed = gitsess(repo, "hooks", "uninstall", "--json")
    assert [h["outcome"] for h in json.loads(removed.stdout)["hooks"]] == ["removed"] * 5
    for name in hooks.HOOKS:
        assert (directory / name).read_text() == _user_hook(name, log)
    assert not list(directory.glob("*.gitsess-user"))
    git(repo, "commit", "-q", "--allow-empty", "-m", "three")
    assert log.read_text().count("post-commit \n") == 2


def test_a_repository_without_sessions_costs_under_50_ms(repo: Path, tmp_path: Path) -> None:
    directory = Path(git(repo, "config", "core.hooksPath"))
    for name in hooks.HOOKS:
        (directory / (name + hooks.USER_SUFFIX)).unlink()  # time gitsess's part alone
    times = []
    for name, args, stdin in [
        ("post-commit", [], b""),
        ("post-checkout", ["a", "b", "1"], b""),
        ("reference-transaction", ["committed"], b"a " + b"0" * 40 + b" refs/heads/x\n"),
    ] * 10:
        start = time.perf_counter()
        subprocess.run([directory / name, *args], cwd=repo, input=stdin, check=True)
        times.append(time.perf_counter() - start)
    assert statistics.median(times) < 0.05, times
    assert not discover(repo).state_dir.exists()  # gitsess was never started


def test_the_scripts_in_hooks_are_the_installed_ones() -> None:
    for name in hooks.HOOKS:
        path = ROOT / "hooks" / name
        assert path.read_text() == hooks.render(name, ["gitsess"])
        assert os.access(path, os.X_OK)
    config = (ROOT / ".pre-commit-hooks.yaml").read_text()
    for name in set(hooks.HOOKS) - {"reference-transaction"}:  # pre-commit has no such stage
        assert f"entry: hooks/{name}\n" in config
        assert f"stages: [{name}]\n" in config


def test_pre_commit_framework_arguments(tmp_path: Path) -> None:
    """pre-commit runs a hook without git's arguments and passes them in its environment."""
    repo = make_repo(tmp_path / "repo")
    state = discover(repo).state_dir
    state.mkdir()
    (state / "sessions.db").touch()
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "gitsess").write_text(f'#!/bin/sh\necho "$*" >{tmp_path / "args"}\n')
    (fake / "gitsess").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{fake}:{os.environ['PATH']}",
        "PRE_COMMIT": "1",
        "PRE_COMMIT_FROM_REF": "aaa",
        "PRE_COMMIT_TO_REF": "bbb",
        "PRE_COMMIT_CHECKOUT_TYPE": "1",
    }
    subprocess.run([ROOT / "hooks" / "post-checkout"], cwd=repo, env=env, check=True)
    assert (tmp_path / "args").read_text() == "hook post-checkout aaa bbb 1\n"


def test_install_from_a_linked_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), "-b", "side")
    done = gitsess(linked, "hooks", "install", "--json", "--command", HOOK_COMMAND)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hooks_dir"] == str(repo / ".git" / "hooks")
    assert gitsess(linked, "new", "here").returncode == 0
    git(linked, "checkout", "-q", "-b", "elsewhere")
    assert session(repo, "here").state == "detached"
    git(linked, "checkout", "-q", "side")
    assert session(repo, "here").state == "active"
    assert_clean(repo)


@pytest.mark.fuse
def test_checkout_detaches_and_run_rebinds(repo: Path) -> None:
    assert gitsess(repo, "new", "s").returncode == 0
    git(repo, "checkout", "-q", "-b", "other")
    assert session(repo, "s").state == "detached"
    refused = gitsess(repo, "run", "-s", "s", "--", "true")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    assert "belongs to branch main" in refused.stderr and "--rebind" in refused.stderr
    git(repo, "checkout", "-q", "main")
    assert session(repo, "s").state == "active"
    git(repo, "checkout", "-q", "other")
    assert gitsess(repo, "ls").stdout.count("s (detached)") == 1
    commit(repo, "o.txt", "o\n")
    ran = gitsess(repo, "run", "--rebind", "-s", "s", "--", "true")
    assert ran.returncode == 0, ran.stderr
    rebound = session(repo, "s")
    assert (rebound.branch, rebound.state) == ("other", "active")
    assert rebound.base_commit == git(repo, "rev-parse", "HEAD")
    assert_clean(repo)


def test_one_line_for_every_session_a_checkout_detaches(repo: Path) -> None:
    """A checkout marks every session of the worktree: one line says so for all (it was a
    line per session, twenty lines with twenty sessions)."""
    for name in ("s", "t", "u"):
        assert gitsess(repo, "new", name).returncode == 0
    for branch, said in (
        ("other", "marked detached 3 sessions ({}): its worktree has branch other checked out,"
         " not main"),
        ("main", "marked active 3 sessions ({}): its worktree is back on main"),
    ):  # fmt: skip
        done = subprocess.run(
            ["git", "checkout", "-q", *(["-b"] if branch == "other" else []), branch],
            cwd=repo, capture_output=True, text=True, check=True,
        )  # fmt: skip
        lines = done.stderr.splitlines()
        assert len(lines) == 1, lines
        names = lines[0].split("(")[1].split(")")[0]
        assert sorted(names.split(", ")) == ["s", "t", "u"]
        assert lines[0] == "gitsess: " + said.format(names)


@pytest.mark.fuse
def test_deleted_branch_archives_and_removes_its_sessions(repo: Path) -> None:
    run_in(repo, "feat", "echo changed > README.md; echo new > new.txt", "--worktree")
    assert gitsess(repo, "new", "plain", "--worktree").returncode == 0
    worktrees = {name: s.worktree for name, s in sessions_of(repo).items()}
    for worktree in worktrees.values():
        git(worktree, "checkout", "-q", "--detach")  # a checked-out branch cannot be deleted
    assert {s.state for s in sessions_of(repo).values()} == {"detached"}
    done = subprocess.run(
        ["git", "branch", "-D", "gitsess/feat", "gitsess/plain"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "removed session feat" in done.stderr
    assert sessions_of(repo) == {}
    assert not any(w.exists() for w in worktrees.values())
    assert archives(repo) == ["refs/gitsess/archive/feat"]  # plain held nothing
    assert archived(repo, "feat", "README.md") == "changed"
    assert archived(repo, "feat", "new.txt") == "new"
    assert_clean(repo)


@pytest.mark.fuse
def test_merged_branches(repo: Path) -> None:
    run_in(repo, "done", "echo D > d.txt", "--worktree")
    run_in(repo, "wip", "echo W > w.txt", "--worktree")
    done, wip = session(repo, "done"), session(repo, "wip")
    # The change is committed in the session's worktree: the commit takes it from the delta.
    commit(done.worktree, "d.txt", "D\n")
    assert gitsess(repo, "diff", "done", "--name-only").stdout == ""
    commit(wip.worktree, "x.txt", "x\n")
    git(repo, "merge", "-q", "--no-edit", "gitsess/done")
    git(repo, "merge", "-q", "--no-edit", "gitsess/wip")
    assert set(sessions_of(repo)) == {"wip"}
    assert not done.worktree.exists()
    assert git(repo, "branch", "--list", "gitsess/done") == ""
    assert session(repo, "wip").state == "merged"
    assert "wip (merged)" in gitsess(repo, "ls").stdout
    assert "w.txt" in gitsess(repo, "diff", "wip", "--name-only").stdout
    assert_clean(repo)


@pytest.mark.fuse
def test_amend_takes_session_changes_and_moves_the_base(repo: Path) -> None:
    run_in(repo, "s", "echo A > a.txt; echo keep > keep.txt")
    old_base = session(repo, "s").base_commit
    (repo / "a.txt").write_text("A\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "--amend", "--no-edit")
    amended = session(repo, "s")
    assert amended.base_commit == git(repo, "rev-parse", "HEAD") != old_base
    assert gitsess(repo, "diff", "s", "--name-only").stdout.split() == ["keep.txt"]
    assert_clean(repo)


@pytest.mark.fuse
def test_rebase_takes_session_changes(repo: Path) -> None:
    run_in(repo, "r", "echo R > r.txt", "--worktree")
    worktree = session(repo, "r").worktree
    commit(worktree, "q.txt", "q\n")  # a commit of its own, so that the rebase rewrites it
    commit(repo, "r.txt", "R\n", "the same change, made on main")
    git(worktree, "rebase", "-q", "main")
    rebased = session(repo, "r")
    assert rebased.state == "active"  # the rebase's detached HEAD did not detach it
    assert gitsess(repo, "diff", "r", "--name-only").stdout == ""
    assert_clean(repo)


@pytest.mark.fuse
def test_removed_worktree_is_archived_at_the_next_hook(repo: Path) -> None:
    run_in(repo, "gone", "echo G > README.md; echo N > n.txt", "--worktree")
    worktree = session(repo, "gone").worktree
    git(repo, "worktree", "remove", str(worktree))
    assert "gone" in sessions_of(repo)  # git ran no hook of ours
    git(repo, "commit", "-q", "--allow-empty", "-m", "tick")
    assert sessions_of(repo) == {}
    assert git(repo, "branch", "--list", "gitsess/gone") == ""  # it held nothing of its own
    assert archived(repo, "gone", "README.md") == "G"
    assert archived(repo, "gone", "n.txt") == "N"
    assert_clean(repo)
    restored = gitsess(repo, "restore", "gone")
    assert restored.returncode == 0, restored.stderr
    names = gitsess(repo, "diff", "gone", "--name-only").stdout.split()
    assert names == ["README.md", "n.txt"]
    assert gitsess(repo, "rm", "gone").returncode == 0
    assert_clean(repo)


def test_a_renamed_branch_is_followed(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "topic")
    assert gitsess(repo, "new", "t").returncode == 0
    git(repo, "branch", "-m", "topic", "topic2")
    git(repo, "commit", "-q", "--allow-empty", "-m", "later")
    renamed = session(repo, "t")
    assert (renamed.branch, renamed.state) == ("topic2", "active")
    assert_clean(repo)


def test_hook_errors_are_logged_and_git_goes_on(repo: Path) -> None:
    assert gitsess(repo, "new", "s").returncode == 0
    state = discover(repo).state_dir
    for name in ("sessions.db-wal", "sessions.db-shm"):
        (state / name).unlink(missing_ok=True)
    (state / "sessions.db").write_bytes(b"not a database" * 100)
    done = subprocess.run(
        ["git", "commit", "-q", "--allow-empty", "-m", "still"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0
    assert "the post-commit hook failed" in done.stderr
    assert eventually(lambda: "post-commit" in (state / "hooks.log").read_text())
    assert "Traceback" in (state / "hooks.log").read_text()


@pytest.mark.fuse
def test_a_commit_inside_a_session_keeps_its_changes(repo: Path) -> None:
    """git inside the session commits to the session's own `.git`: the real branch does not
    move, no hook sweeps anything, and the session's changes stay in the delta."""
    script = "echo I > i.txt; echo J > j.txt; git add i.txt && git commit -q -m inside"
    head = git(repo, "rev-parse", "HEAD")
    run_in(repo, "in", script)
    assert git(repo, "rev-parse", "HEAD") == head
    assert run_in(repo, "in", "git show HEAD:i.txt").stdout == "I\n"
    assert not (repo / "i.txt").exists()
    seen = run_in(repo, "in", "cat i.txt j.txt")
    assert seen.stdout == "I\nJ\n"
    assert_clean(repo)


def test_a_renamed_branch_is_followed_at_once(repo: Path) -> None:
    """No later git command, no gc: the rename's own hook follows it (issue 29 item 19)."""
    git(repo, "checkout", "-q", "-b", "topic")
    assert gitsess(repo, "new", "t").returncode == 0
    git(repo, "branch", "-m", "topic", "renamed")
    assert eventually(lambda: session(repo, "t").branch == "renamed", timeout=15)
    assert session(repo, "t").state == "active"


def test_a_renamed_branch_is_followed_with_reflogs_off(repo: Path) -> None:
    """No reflog says "renamed": the worktree's HEAD, which git moves to the new name, does."""
    git(repo, "config", "core.logAllRefUpdates", "false")
    git(repo, "checkout", "-q", "-b", "topic")
    assert gitsess(repo, "new", "t").returncode == 0
    git(repo, "branch", "-m", "topic", "renamed")
    assert eventually(lambda: session(repo, "t").branch == "renamed", timeout=15)
    assert gitsess(repo, "gc").returncode == 0
    assert session(repo, "t").state == "active" and archives(repo) == []
