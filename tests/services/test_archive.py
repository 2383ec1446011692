"""discard, rm (archive first), archives, restore and fork, through real sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.git.binding import WorktreeSpec
from gitsess.git.repo import RepoContext
from gitsess.services import sessions
from gitsess.store.registry import Session
from tests.apply_util import Cli, Mounted, changes_left, mounted
from tests.git.helpers import tree_state
from tests.live_util import eventually
from tests.util import git

pytestmark = pytest.mark.fuse


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


@pytest.fixture
def exp(ctx: RepoContext) -> Session:
    return sessions.create(ctx, "exp", title="an experiment")


@pytest.fixture
def live_exp(ctx: RepoContext, exp: Session) -> Iterator[Mounted]:
    with mounted(ctx, exp) as m:
        yield m


def test_discard_everything_or_by_pathspec(live_exp: Mounted, ctx: RepoContext, cli: Cli) -> None:
    m = live_exp
    m.write("README.md", "changed\n")
    m.write("src/app.py", "changed too\n")
    m.write("build.log", "ignored, discarded all the same\n")
    m.write(".gitignore", "*.log\n")
    _, err = cli("discard", "exp", "README.md", code=1)
    assert "pass -y" in err
    out, _ = cli("discard", "exp", "-y", "README.md")
    assert "M  README.md" in out and "Discarded 1 change(s)" in out
    assert (m.mnt / "README.md").read_text() == "hello\n"
    assert changes_left(ctx, m.session) == [".gitignore", "build.log", "src/app.py"]
    cli("discard", "exp", "-y")
    assert changes_left(ctx, m.session) == []
    assert (m.mnt / "src" / "app.py").read_text() == "print('hi')\n"
    _, err = cli("discard", "exp", "-y")
    assert "Nothing to discard" in err


@pytest.mark.parametrize("live", [True, False], ids=["live", "offline"])
def test_discard_part_of_a_directory_the_session_made(
    ctx: RepoContext, exp: Session, cli: Cli, live: bool
) -> None:
    with mounted(ctx, exp) as m:
        m.write("pkg/keep.py", "kept\n")
        m.write("pkg/drop.py", "dropped\n")
        m.write("pkg/sub/deep.py", "dropped too\n")
        if live:
            cli("discard", "exp", "-y", "--", "pkg/drop.py", "pkg/sub")
    if not live:
        cli("discard", "exp", "-y", "--", "pkg/drop.py", "pkg/sub")
    assert changes_left(ctx, exp) == ["pkg/keep.py"]


def test_rm_archives_unapplied_work_and_restore_brings_it_back(
    live_exp: Mounted, ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    m = live_exp
    m.write("README.md", "work in progress\n")
    m.write("notes/idea.txt", "an idea\n")
    (m.mnt / "src" / "app.py").unlink()
    m.write("scratch.log", "ignored: not archived\n")
    m.write(".gitignore", "*.log\n")
    view = tree_state(m.mnt)
    _, err = cli("rm", "exp")
    assert "archived as refs/gitsess/archive/exp" in err
    assert git(repo, "log", "-1", "--format=%P", "refs/gitsess/archive/exp") == git(
        repo, "rev-parse", "HEAD"
    )
    assert git(repo, "show", "refs/gitsess/archive/exp:notes/idea.txt") == "an idea"
    assert "Gitsess-Title: an experiment" in git(repo, "log", "-1", "refs/gitsess/archive/exp")
    [listed] = json.loads(cli("archives", "--json")[0])
    shown = (listed["restore"], listed["changed_files"], listed["title"])
    assert shown == ("exp", 4, "an experiment")
    assert "exp" in cli("archives")[0]

    out, _ = cli("restore", "exp")
    assert "Restored session exp" in out and "4 path(s)" in out
    restored = sessions.resolve(ctx, "exp")
    assert restored.title == "an experiment"
    assert restored.id == m.session.id  # its id back (issue 36 item 15)
    assert changes_left(ctx, restored) == [
        ".gitignore",
        "README.md",
        "notes/idea.txt",
        "src/app.py",
    ]
    with mounted(ctx, restored) as back:
        expected = {k: v for k, v in view.items() if k != "scratch.log"}
        assert tree_state(back.mnt) == expected
    assert git(repo, "for-each-ref", "refs/gitsess/") == ""
    assert "No archived sessions" in cli("archives")[0]


def test_restore_onto_a_taken_name_says_how_and_keeps_the_archive(
    live_exp: Mounted, ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    live_exp.write("notes/idea.txt", "an idea\n")
    cli("rm", "exp")
    sessions.create(ctx, "exp")
    _, err = cli("restore", "exp", code=1)
    assert err == (
        "gitsess: a session named 'exp' already exists: restore under another name "
        "(--as NEW_NAME)\n"
    )
    assert "refs/gitsess/archive/exp" in git(repo, "for-each-ref", "refs/gitsess/")
    out, _ = cli("restore", "exp", "--as", "exp-again")
    assert "Restored session exp-again" in out
    assert changes_left(ctx, sessions.resolve(ctx, "exp-again")) == ["notes/idea.txt"]


def test_rm_of_a_session_whose_worktree_is_gone_archives_its_work(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    made = sessions.create(ctx, "gone", worktree=WorktreeSpec())
    with mounted(ctx, made) as m:
        m.write("notes/idea.txt", "kept though the worktree went\n")
    git(repo, "worktree", "remove", str(made.worktree))
    _, err = cli("rm", "gone")
    assert "archived as refs/gitsess/archive/gone" in err
    assert git(repo, "show", "refs/gitsess/archive/gone:notes/idea.txt") == (
        "kept though the worktree went"
    )


def test_rm_of_a_session_whose_worktree_is_gone_keeps_its_commits(
    ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    """The session's own commits are kept too (issue 36 item 15), and `restore` brings them
    back: they live only in its delta once the worktree, and its git state, are gone."""
    made = sessions.create(ctx, "gone", worktree=WorktreeSpec())
    with mounted(ctx, made) as m:
        m.write("made.txt", "committed inside\n")
        git(m.mnt, "add", "made.txt")
        git(m.mnt, "commit", "-q", "-m", "made inside")
        m.write("notes/idea.txt", "not committed\n")
        cli("kv", "gone", "set", "step", "3")
    git(repo, "worktree", "remove", str(made.worktree))
    _, err = cli("rm", "gone")
    assert "archived as refs/gitsess/archive/gone" in err
    assert "made inside" in git(repo, "log", "--format=%s", "refs/gitsess/archive/gone^@")
    cli("restore", "gone")
    back = sessions.resolve(ctx, "gone")
    with mounted(ctx, back) as m:
        assert git(m.mnt, "log", "-1", "--format=%s") == "made inside"
        assert (m.mnt / "made.txt").read_text() == "committed inside\n"
        assert (m.mnt / "notes" / "idea.txt").read_text() == "not committed\n"
    assert cli("kv", "gone", "get", "step")[0].strip() == "3"


def test_rm_without_unapplied_changes_archives_nothing(
    live_exp: Mounted, ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    live_exp.write("README.md", "hello\n")  # copied up, same content
    _, err = cli("rm", "exp")
    assert "archived" not in err
    assert git(repo, "for-each-ref", "refs/gitsess/") == ""
    _, err = cli("restore", "exp", code=1)
    assert err.strip() == "gitsess: no archive 'exp' (see `gitsess archives`)"


def test_archives_of_one_name_do_not_overwrite_each_other(ctx: RepoContext, cli: Cli) -> None:
    for text in ("first\n", "second\n"):
        session = sessions.create(ctx, "exp")
        with mounted(ctx, session) as m:
            m.write("README.md", text)
        cli("rm", "exp")
    refs = cli("archives", "--json")[0]
    assert {a["restore"] for a in json.loads(refs)} == {"exp", "exp-2"}
    sessions.create(ctx, "exp")
    _, err = cli("restore", "exp-2", code=1)
    assert "already exists" in err  # the name comes from the archive: exp
    assert len(json.loads(cli("archives", "--json")[0])) == 2  # a failed restore keeps it
    cli("restore", "exp-2", "--as", "again")
    cli("restore", "exp", "--as", "first")
    with mounted(ctx, sessions.resolve(ctx, "first")) as m:
        assert (m.mnt / "README.md").read_text() == "first\n"


def test_fork_copies_the_delta_and_then_goes_its_own_way(
    live_exp: Mounted, ctx: RepoContext, repo: Path, cli: Cli
) -> None:
    m = live_exp
    m.write("README.md", "before the fork\n")
    out, _ = cli("fork", "exp", "copy")
    assert "Forked session exp into copy" in out
    copy = sessions.resolve(ctx, "copy")
    assert (copy.worktree, copy.branch, copy.base_commit) == (
        m.session.worktree,
        m.session.branch,
        m.session.base_commit,
    )
    assert copy.parent == m.session.id and not copy.created_worktree
    with mounted(ctx, copy) as c:
        assert (c.mnt / "README.md").read_text() == "before the fork\n"
        c.write("only-in-copy.txt", "copy\n")
        m.write("only-in-exp.txt", "exp\n")
        assert not (m.mnt / "only-in-copy.txt").exists()
        assert not (c.mnt / "only-in-exp.txt").exists()
        c.write("README.md", "the copy's own\n")  # data files are copies, not shared
        assert (m.mnt / "README.md").read_text() == "before the fork\n"
        (repo / "src" / "app.py").write_text("real edit\n")  # the real tree shows in both
        assert eventually(lambda: (c.mnt / "src" / "app.py").read_text() == "real edit\n")
    assert changes_left(ctx, copy) == ["README.md", "only-in-copy.txt"]
    assert changes_left(ctx, m.session) == ["README.md", "only-in-exp.txt"]
    _, err = cli("fork", "exp", "copy", code=1)
    assert "already exists" in err


# Rewrites files of 64 KiB (data files, not inline), each all one byte, and removes some, until
# its stdin closes.
_REWRITER = """
import os, sys, select
root, n = sys.argv[1], 0
os.makedirs(f"{root}/w", exist_ok=True)
# "started" once the first rewrite is whole: a fork before it finds `w` empty (a slow start)
while n < 1 or not select.select([sys.stdin], [], [], 0)[0]:
    path = f"{root}/w/{n % 8}.bin"
    with open(path, "wb") as f:
        for _ in range(16):
            f.write(bytes([n % 250 + 1]) * 4096)
    if n % 3 == 0 and os.path.exists(f"{root}/w/{(n + 4) % 8}.bin"):
        os.unlink(f"{root}/w/{(n + 4) % 8}.bin")
    n += 1
    if n == 1:
        print("started", flush=True)
"""


def test_a_fork_of_a_live_session_is_a_snapshot_of_whole_writes(
    live_exp: Mounted, ctx: RepoContext, cli: Cli
) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _REWRITER, str(live_exp.mnt)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"started\n"
        for k in range(5):
            cli("fork", "exp", f"copy{k}")
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        writer.wait(timeout=30)
    for k in range(5):
        with mounted(ctx, sessions.resolve(ctx, f"copy{k}")) as c:
            found = sorted((c.mnt / "w").iterdir())
            assert found
            for path in found:
                data = path.read_bytes()
                # a whole write of one of the rewrites (the kernel sends a file's pages at
                # close or fsync, not in the middle of a `write`): never a mix, never zeros
                assert len(data) in range(0, 65537, 4096) and len(set(data)) <= 1, path
                assert b"\0" not in data, path
