"""What git leaves alone, gitsess leaves alone: a repository made inside a session (never
written through nor deleted by an apply), a `.git` by another spelling (named and skipped);
and file names that are bytes, not text, from diff to gc. Real mounts, real processes."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_util import unmount_all
from tests.util import GITSESS, git

pytestmark = pytest.mark.fuse

BAD = b"bad\xff"  # not UTF-8: a name git takes as bytes


@pytest.fixture
def here(repo: Path) -> Iterator[Path]:
    try:
        yield repo
    finally:
        unmount_all(repo)


def gitsess(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """gitsess as a user runs it; output that is not UTF-8 kept as its bytes (os.fsdecode)."""
    return subprocess.run(
        [*GITSESS, *args], cwd=cwd, capture_output=True, text=True, errors="surrogateescape",
        check=False, timeout=60,
    )  # fmt: skip


def ok(cwd: Path, *args: str) -> str:
    done = gitsess(cwd, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout + done.stderr


def one_line_error(cwd: Path, *args: str) -> str:
    done = gitsess(cwd, *args)
    assert done.returncode != 0, (args, done.stdout)
    assert done.stderr.startswith("gitsess: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def run(cwd: Path, script: str, session: str = "exp") -> str:
    return ok(cwd, "run", "-s", session, "--", "sh", "-c", script)


NESTED = (
    "mkdir lib && cd lib && git init -q -b main && echo v1 > lib.txt && git add lib.txt"
    " && git -c user.name=t -c user.email=t@t commit -q -m lib && cd .. && echo top > top.txt"
)


# ---------------------------------------------------------------------------------------------
# a nested repository


@pytest.mark.parametrize("target", ["--worktree", "--commit"])
def test_a_repository_made_in_a_session_survives_apply(here: Path, target: str) -> None:
    ok(here, "new", "exp")
    run(here, NESTED)
    out = ok(here, "diff", "exp", "--name-only")
    assert "top.txt" in out and "lib/lib.txt" not in out
    assert "a repository of its own, or a name git refuses): lib" in out

    args = ["apply", "exp", target] + (["-m", "top"] if target == "--commit" else [])
    out = ok(here, *args)
    assert "a repository of its own, or a name git refuses): lib" in out
    assert (here / "top.txt").read_text() == "top\n"
    assert not (here / "lib").exists()  # never written through ...
    inside = run(here, "git -C lib log --format=%s && cat lib/lib.txt && git -C lib status -s")
    assert inside.splitlines() == ["lib", "v1"]  # ... and never deleted, commit and all
    assert ok(here, "diff", "exp", "--name-only").strip().endswith("lib")
    if target == "--commit":
        assert git(here, "show", "--name-only", "--format=", "HEAD") == "top.txt"


def test_a_repository_in_the_real_tree_is_never_deleted_by_apply(here: Path) -> None:
    (here / "vendor").mkdir()
    git(here / "vendor", "init", "-q", "-b", "main")
    (here / "vendor" / "v.txt").write_text("vendored\n")
    ok(here, "new", "exp")
    run(here, "rm -rf vendor && echo x > x.txt")
    out = ok(here, "apply", "exp", "--worktree")
    assert "refuses): vendor" in out
    assert (here / "vendor" / ".git" / "HEAD").is_file()
    assert (here / "vendor" / "v.txt").read_text() == "vendored\n"


@pytest.mark.parametrize("name", [".GIT", ".Git", "git~1", ".git."])
@pytest.mark.parametrize("sub", ["sub", "src"], ids=["new-dir", "real-dir"])
def test_a_dotgit_by_another_spelling_is_named_and_skipped(here: Path, name: str, sub: str) -> None:
    """In a directory the session made, or in a real one (where the name itself is the path
    the session touched)."""
    ok(here, "new", "exp")
    run(here, f"mkdir -p '{sub}/{name}' && echo x > '{sub}/{name}/config' && echo y > {sub}/ok.txt")
    out = ok(here, "diff", "exp")
    assert f"refuses): {sub}/{name}" in out and "+y" in out
    patch = ok(here, "apply", "exp", "--patch")
    assert f"{sub}/ok.txt" in patch and f"{sub}/{name}/config" not in patch.split("gitsess:")[0]
    out = ok(here, "apply", "exp", "--commit", "-m", "ok")
    assert f"refuses): {sub}/{name}" in out
    assert git(here, "show", "--name-only", "--format=", "HEAD") == f"{sub}/ok.txt"
    assert not (here / sub / name).exists()
    assert run(here, f"cat '{sub}/{name}/config'") == "x\n"  # still the session's


def test_a_top_level_dotgit_in_a_main_worktree_is_gits_as_in_a_linked_one(here: Path) -> None:
    """`.GIT` at the top of a view is git's in every view (a linked worktree's common dir; in
    a main worktree a name git refuses to track): like `.git`, never diffed nor applied, left
    by a whole discard, dropped when named."""
    ok(here, "new", "exp")
    run(here, "mkdir .GIT && echo x > .GIT/x && echo y > ok.txt")
    out = ok(here, "diff", "exp")
    assert "+y" in out and ".GIT" not in out
    out = ok(here, "apply", "exp", "--worktree")
    assert ".GIT" not in out and (here / "ok.txt").read_text() == "y\n"
    assert not (here / ".GIT").exists()
    assert run(here, "cat .GIT/x") == "x\n"  # still the session's
    ok(here, "discard", "exp", "--yes")
    assert run(here, "cat .GIT/x") == "x\n"  # as its `.git`, not among the changes
    ok(here, "discard", "exp", "--yes", "--", ".GIT")
    assert run(here, "test -e .GIT || echo gone") == "gone\n"


# ---------------------------------------------------------------------------------------------
# names that are not UTF-8


def test_a_name_that_is_not_utf8_goes_through_every_command(here: Path) -> None:
    ok(here, "new", "exp")
    run(here, "printf x > \"$(printf 'bad\\377')\" && printf y > fine.txt")
    names = ok(here, "diff", "exp", "--name-only")
    assert names.splitlines() == ['"bad\\377"', "fine.txt"]  # quoted, as git quotes it
    # -z: the name's bytes, as it is
    assert os.fsencode(ok(here, "diff", "exp", "--name-only", "-z")) == BAD + b"\0fine.txt\0"
    status = os.fsencode(ok(here, "diff", "exp", "--name-status", "-z"))
    assert status == b"A\0" + BAD + b"\0A\0fine.txt\0"
    assert '+++ "b/bad\\377"' in ok(here, "diff", "exp")  # quoted, as git quotes it
    assert '+++ "b/bad\\377"' in ok(here, "apply", "exp", "--patch")
    ok(here, "apply", "exp", "--commit", "-m", "bytes")
    shown = git(here, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert shown == ['"bad\\377"', "fine.txt"]
    assert (here / os.fsdecode(BAD)).read_bytes() == b"x"
    ok(here, "new", "two")
    run(here, "printf z > \"$(printf 'bad\\376')\"", session="two")
    ok(here, "apply", "two", "--worktree")
    assert (here / os.fsdecode(b"bad\xfe")).read_bytes() == b"z"
    ok(here, "new", "three")
    run(here, "printf w > \"$(printf 'w\\375')\"", session="three")
    ok(here, "gc")
    ok(here, "rm", "three", "--force")
    assert b"w\xfd" not in os.listdir(os.fsencode(here))


@pytest.mark.parametrize(
    "args",
    [("show", "\udcff"), ("new", "x\udcff"), ("kv", "-s", "exp", "set", "\udcff", "1"),
     ("kv", "-s", "exp", "set", "k", "\udcff"), ("rename", "exp", "\udcff"),
     ("apply", "exp", "--commit", "-m", "\udcff"), ("new", "-t", "t\udcff", "titled"),
     ("run", "-s", "exp", "--", "touch", "\udcff")],
)  # fmt: skip
def test_arguments_that_are_not_utf8_get_a_clean_answer(here: Path, args: tuple[str, ...]) -> None:
    ok(here, "new", "exp")
    run(here, "echo x > x.txt")
    done = gitsess(here, *args)
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
    if done.returncode != 0:
        assert done.stderr.startswith("gitsess: ") and done.stderr.count("\n") == 1, done.stderr
    listed = json.loads(gitsess(here, "ls", "--json").stdout)
    assert "exp" in [s["name"] for s in listed]  # nothing broke the registry
    assert "x.txt" in ok(here, "diff", "exp", "--name-only")
