"""`gitsess kv`: JSON values per session, from outside and from inside a live session."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess import kv
from gitsess.git.repo import RepoContext
from gitsess.sessions import create

from .live_util import run, unmount_all
from .util import gitsess

# The gitsess program as a command inside `sh -c`.
GS = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "gitsess"))


@pytest.fixture
def repo(repo: Path) -> Iterator[Path]:
    try:
        yield repo
    finally:
        unmount_all(repo)


def ok(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = gitsess(repo, *args, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fails(repo: Path, *args: str) -> str:
    done = gitsess(repo, *args)
    assert done.returncode == 1, done.stdout
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_strings_and_json_values(repo: Path, ctx: RepoContext) -> None:
    session = create(ctx, "exp")
    assert not (ctx.session_dir(session.id) / "delta.db").exists()
    assert ok(repo, "kv", "exp", "ls", "--json") == "{}\n"
    ok(repo, "kv", "exp", "set", "status", "running tests")
    ok(repo, "kv", "exp", "set", "plan", "--json", '{"steps": [1, 2], "done": false}')
    ok(repo, "kv", "-s", "exp", "set", "count", "--json", "3")
    ok(repo, "kv", "-1", "set", "greeting", "grüße ✓")
    assert ok(repo, "kv", "exp", "get", "status") == "running tests\n"
    assert ok(repo, "kv", "exp", "get", "status", "--json") == '"running tests"\n'
    assert ok(repo, "kv", "exp", "get", "plan") == '{"steps": [1, 2], "done": false}\n'
    assert ok(repo, "kv", "exp", "get", "greeting") == "grüße ✓\n"
    assert json.loads(ok(repo, "kv", "exp", "ls", "--json")) == {
        "count": 3,
        "greeting": "grüße ✓",
        "plan": {"steps": [1, 2], "done": False},
        "status": "running tests",
    }
    table = ok(repo, "kv", "exp", "ls")
    assert [line.split()[0] for line in table.splitlines()] == [
        "KEY",
        "count",
        "greeting",
        "plan",
        "status",
    ]
    ok(repo, "kv", "exp", "set", "count", "--json", "4")
    assert kv.get(ctx, session, "count").value == 4
    ok(repo, "kv", "exp", "rm", "count")
    assert [i.key for i in kv.items(ctx, session)] == ["greeting", "plan", "status"]


def test_bad_input_is_one_line(repo: Path, ctx: RepoContext) -> None:
    create(ctx, "exp")
    assert fails(repo, "kv", "exp", "get", "nope") == "gitsess: session exp has no key 'nope'\n"
    assert fails(repo, "kv", "exp", "rm", "nope") == "gitsess: session exp has no key 'nope'\n"
    assert fails(repo, "kv", "exp", "set", "k", "--json", "{oops").startswith(
        "gitsess: not valid JSON"
    )
    assert fails(repo, "kv", "exp", "set", "k", "--json", "NaN").startswith(
        "gitsess: not valid JSON"
    )
    assert fails(repo, "kv", "exp", "set", "", "v") == "gitsess: a key cannot be empty\n"
    assert fails(repo, "kv", "ls").startswith("gitsess: no session given")
    assert fails(repo, "kv", "ghost", "ls").startswith("gitsess: no session 'ghost'")
    both = gitsess(repo, "kv", "exp", "-s", "exp", "ls")
    assert both.returncode == 2 and "give one session" in both.stderr


def test_session_from_the_environment(repo: Path, ctx: RepoContext) -> None:
    create(ctx, "exp")
    ok(repo, "kv", "set", "who", "env", env={"GITSESS_SESSION": "exp"})
    assert ok(repo, "kv", "exp", "get", "who") == "env\n"


@pytest.mark.fuse
def test_inside_and_outside_a_live_session(repo: Path) -> None:
    # Inside: the session is the one the command runs in.
    done = run(repo, "exp", f"{GS} kv set from-inside --json '[1]'; {GS} kv get from-inside")
    assert done.stdout == "[1]\n"
    assert ok(repo, "kv", "exp", "get", "from-inside") == "[1]\n"
    ok(repo, "mount", "exp")
    try:
        # While the daemon serves the session: both sides write, both see the other's values,
        # and the files written meanwhile are the session's as usual.
        ok(repo, "kv", "exp", "set", "from-outside", "hello")
        script = (
            f'test "$({GS} kv get from-outside)" = hello || exit 3; '
            f"for i in 1 2 3; do echo $i > f$i.txt; {GS} kv set n$i --json $i; done"
        )
        run(repo, "exp", script)
        assert json.loads(ok(repo, "kv", "exp", "ls", "--json")) == {
            "from-inside": [1],
            "from-outside": "hello",
            **{f"n{i}": i for i in range(1, 4)},
        }
        assert ok(repo, "fs", "exp", "cat", "f3.txt") == "3\n"
        assert not (repo / "f3.txt").exists()
    finally:
        ok(repo, "umount", "exp")
    # The key-value store and the view live side by side in delta.db across remounts.
    assert run(repo, "exp", f"cat f1.txt; {GS} kv get n3").stdout == "1\n3\n"
