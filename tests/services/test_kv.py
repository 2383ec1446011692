"""`gitsess kv`: JSON values per session, from outside and from inside a live session."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.services import kv
from gitsess.services.sessions import create
from tests.live_util import InProcess, call, run
from tests.util import gitsess

# The gitsess program as a command inside `sh -c`.
GS = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "gitsess"))


def kv_values(gs: InProcess) -> dict[str, object]:
    """`kv ls --json` as key: value (each entry also says when it was set)."""
    entries = json.loads(gs.ok("kv", "exp", "ls", "--json"))
    assert all(e["updated_at"] for e in entries)
    return {e["key"]: e["value"] for e in entries}


def test_strings_and_json_values(ctx: RepoContext, gs: InProcess) -> None:
    session = create(ctx, "exp")
    assert not (ctx.session_dir(session.id) / "delta.db").exists()
    assert gs.ok("kv", "exp", "ls", "--json") == "[]\n"
    assert not (ctx.session_dir(session.id) / "delta.db").exists()
    gs.ok("kv", "exp", "set", "status", "running tests")
    gs.ok("kv", "exp", "set", "plan", "--json", '{"steps": [1, 2], "done": false}')
    gs.ok("kv", "-s", "exp", "set", "count", "--json", "3")
    gs.ok("kv", "-1", "set", "greeting", "grüße ✓")
    assert gs.ok("kv", "exp", "get", "status") == "running tests\n"
    assert gs.ok("kv", "exp", "get", "status", "--json") == '"running tests"\n'
    assert gs.ok("kv", "exp", "get", "plan") == '{"steps": [1, 2], "done": false}\n'
    assert gs.ok("kv", "exp", "get", "greeting") == "grüße ✓\n"
    assert kv_values(gs) == {
        "count": 3,
        "greeting": "grüße ✓",
        "plan": {"steps": [1, 2], "done": False},
        "status": "running tests",
    }
    table = gs.ok("kv", "exp", "ls")
    assert [line.split()[0] for line in table.splitlines()] == [
        "KEY",
        "count",
        "greeting",
        "plan",
        "status",
    ]
    gs.ok("kv", "exp", "set", "count", "--json", "4")
    assert kv.get(ctx, session, "count").value == 4
    gs.ok("kv", "exp", "rm", "count")
    assert [i.key for i in kv.items(ctx, session)] == ["greeting", "plan", "status"]


def test_bad_input_is_one_line(
    repo: Path, ctx: RepoContext, gs: InProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    create(ctx, "exp")
    assert gs.fails("kv", "exp", "get", "nope") == "gitsess: session exp has no key 'nope'\n"
    assert gs.fails("kv", "exp", "rm", "nope") == "gitsess: session exp has no key 'nope'\n"
    for bad in ("{oops", "NaN", "1e999"):
        assert gs.fails("kv", "exp", "set", "k", "--json", bad).startswith(
            "gitsess: not valid JSON"
        )
    # deeper than Python's json nests (it was a RecursionError's traceback)
    deep = "[" * 100_000 + "]" * 100_000
    assert gs.fails("kv", "exp", "set", "k", "--json", deep) == (
        "gitsess: not valid JSON: nested too deeply\n"
    )
    with pytest.raises(GitsessError, match="not a JSON value: nested too deeply"):
        deep_value: list[object] = []
        for _ in range(100_000):
            deep_value = [deep_value]
        kv.encode(deep_value)
    assert gs.fails("kv", "exp", "set", "", "v") == "gitsess: a key cannot be empty\n"
    assert gs.fails("kv", "ls").startswith("gitsess: no session given")
    assert gs.fails("kv", "ghost", "ls").startswith("gitsess: no session 'ghost'")
    code, _, err = call(capsys, "kv", "exp", "-s", "exp", "ls")
    assert code == 2 and "give one session" in err
    # The real program says the same, on one line.
    done = gitsess(repo, "kv", "exp", "get", "nope")
    assert (done.returncode, done.stderr) == (1, "gitsess: session exp has no key 'nope'\n")


def test_session_from_the_environment(
    ctx: RepoContext, gs: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(ctx, "exp")
    monkeypatch.setenv("GITSESS_SESSION", "exp")
    gs.ok("kv", "set", "who", "env")
    monkeypatch.delenv("GITSESS_SESSION")
    assert gs.ok("kv", "exp", "get", "who") == "env\n"


@pytest.mark.fuse
def test_inside_and_outside_a_live_session(repo: Path, gs: InProcess) -> None:
    # Inside: the session is the one the command runs in.
    done = run(repo, "exp", f"{GS} kv set from-inside --json '[1]'; {GS} kv get from-inside")
    assert done.stdout == "[1]\n"
    assert gs.ok("kv", "exp", "get", "from-inside") == "[1]\n"
    gs.ok("mount", "exp")
    try:
        # While the daemon serves the session: both sides write, both see the other's values,
        # and the files written meanwhile are the session's as usual.
        gs.ok("kv", "exp", "set", "from-outside", "hello")
        script = (
            f'test "$({GS} kv get from-outside)" = hello || exit 3; '
            f"for i in 1 2 3; do echo $i > f$i.txt; {GS} kv set n$i --json $i; done"
        )
        run(repo, "exp", script)
        assert kv_values(gs) == {
            "from-inside": [1],
            "from-outside": "hello",
            **{f"n{i}": i for i in range(1, 4)},
        }
        assert gs.ok("fs", "exp", "cat", "f3.txt") == "3\n"
        assert not (repo / "f3.txt").exists()
    finally:
        gs.ok("umount", "exp")
    # The key-value store and the view live side by side in delta.db across remounts.
    assert run(repo, "exp", f"cat f1.txt; {GS} kv get n3").stdout == "1\n3\n"
