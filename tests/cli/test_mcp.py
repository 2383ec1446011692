"""`gitsess mcp` driven by the MCP SDK's own client over stdio (a real subprocess): every tool,
its answers against the CLI's --json, bad inputs, the default session inside a session, and two
fake agents that collide (the issue's "done when")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitsess.cli.mcp_server import TOOLS
from tests.cli.test_json_schema import fits, keys, vocabulary
from tests.util import git, gitsess, snapshot

pytestmark = pytest.mark.fuse

AGENT = Path(__file__).parents[1] / "mcp_agent.py"


def agent(cwd: Path, plan: list[list[Any]], errlog: Path, **env: str) -> list[list[Any]]:
    """The fake agent's answers to `plan`; the server's stderr is appended to `errlog`."""
    done = subprocess.run(
        [sys.executable, str(AGENT), json.dumps(plan), str(errlog)],
        cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers: list[list[Any]] = json.loads(done.stdout)
    return answers


def ok(answer: list[Any]) -> Any:
    is_error, data = answer
    assert not is_error, data
    return data


def cli_json(repo: Path, *args: str) -> Any:
    done = gitsess(repo, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cli_error(repo: Path, *args: str) -> str:
    done = gitsess(repo, *args)
    assert done.returncode == 1, done.stdout
    return done.stderr.strip().removeprefix("gitsess: ")


@pytest.mark.timeout(400)
def test_every_tool_answers_what_the_cli_json_gives(repo: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "server.err"
    write = "printf 'changed\\n' > README.md && printf 'new\\n' > new.txt"
    answers = agent(
        repo,
        [
            ["list_tools", {}],
            ["new", {"name": "alpha", "title": "first"}],
            ["run", {"session": "alpha", "command": ["sh", "-c", write + "; echo done"]}],
            ["kv_set", {"session": "alpha", "key": "plan", "value": {"step": 1}}],
            ["kv_get", {"session": "alpha", "key": "plan"}],
            ["fork", {"session": "alpha", "new_name": "beta"}],
            ["discard", {"session": "beta", "paths": ["new.txt"]}],
            ["run", {"session": "beta", "command": ["sh", "-c", "echo beta > README.md"]}],
        ],
        errlog,
    )
    assert ok(answers[0]) == sorted(t.name for t in TOOLS)
    made = ok(answers[1])
    assert made["name"] == "alpha" and made["title"] == "first"
    ran = ok(answers[2])
    assert (ran["exit_code"], ran["timed_out"], ran["output"]) == (0, False, "done\n")
    assert ok(answers[3]) == {"key": "plan", "value": {"step": 1}}
    assert ok(answers[4]) == {"step": 1}
    assert ok(answers[5])["name"] == "beta"
    discarded = ok(answers[6])
    assert (discarded["name"], discarded["dropped"], discarded["kept"]) == ("beta", ["new.txt"], [])
    # the keys of `discard -y --json` (it answered `discarded`, outside docs/json.md)
    known = vocabulary()
    assert [k for _, k, v in keys(discarded) if k not in known or not fits(v, known[k])] == []

    # The read-only tools against the CLI's --json, taken after them.
    reads = agent(
        repo,
        [
            ["show", {"session": "alpha"}],
            ["sessions", {}],
            ["diff", {"session": "alpha"}],
            ["diff", {"session": "alpha", "pathspecs": ["new.txt"], "stat": True}],
            ["log", {"session": "alpha", "ops": ["create"]}],
            ["overlaps", {}],
        ],
        errlog,
    )
    shown, listed, diffed, stat, logged, radar = (ok(a) for a in reads)
    cli_show = cli_json(repo, "show", "alpha", "--json")
    assert shown.keys() == cli_show.keys()
    for key in ("id", "name", "title", "branch", "base_commit", "changed_files", "drift"):
        assert shown[key] == cli_show[key], key
    cli_ls = cli_json(repo, "ls", "--json")
    assert (
        [(s["name"], s["conflicts_with"]) for s in listed]
        == [(s["name"], s["conflicts_with"]) for s in cli_ls]
        == [("alpha", ["beta"]), ("beta", ["alpha"])]
    )
    cli_diff = cli_json(repo, "diff", "alpha", "--json")
    assert {k: v for k, v in diffed.items() if k != "notes"} == cli_diff
    assert [f["path"] for f in stat["files"]] == ["new.txt"] and "patch" not in stat["files"][0]
    lines = gitsess(repo, "log", "alpha", "--json", "--op", "create").stdout.splitlines()
    cli_log = [json.loads(line) for line in lines]
    assert logged == cli_log and {e["path"] for e in logged} >= {"new.txt"}
    assert radar == cli_json(repo, "overlaps", "--json")
    assert radar[0]["conflicts"] == ["README.md"]

    # apply: a patch (dry run and real), then a commit
    applied = agent(
        repo,
        [
            ["apply", {"session": "alpha", "target": "patch"}],
            ["apply", {"session": "alpha", "target": "commit", "dry_run": True}],
            ["apply", {"session": "alpha", "message": "from mcp"}],
        ],
        errlog,
    )
    patch, dry, landed = (ok(a) for a in applied)
    assert "+changed" in patch["patch"] and patch["target"] == "patch"
    assert (
        dry["dry_run"] is True
        and dry["commit"] is None
        and dry["applied"] == ["README.md", "new.txt"]
    )
    assert landed["ok"] is True and landed["now_conflicts"] == ["beta"]
    assert git(repo, "log", "-1", "--format=%s") == "from mcp"
    assert "Traceback" not in errlog.read_text()


def _state(repo: Path) -> tuple[object, ...]:
    """What a user could see change: refs, the worktree, the sessions, exp's delta and kv (not
    SQLite's own files, which a read may touch)."""
    files = {k: v for k, v in snapshot(repo).items() if not k.startswith(".git")}
    # (ls last: reading exp's delta the first time creates it, and ls counts 0 changes then
    # where it said null before)
    return (
        git(repo, "for-each-ref"), files, cli_json(repo, "diff", "exp", "--json"),
        cli_json(repo, "kv", "exp", "ls", "--json"), cli_json(repo, "ls", "--json"),
    )  # fmt: skip


@pytest.mark.timeout(300)
def test_bad_input_is_an_error_with_the_cli_message_and_changes_nothing(
    repo: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "server.err"
    assert gitsess(repo, "new", "exp").returncode == 0
    state = _state(repo)
    answers = agent(
        repo,
        [
            ["show", {"session": "nosuch"}],
            ["show", {}],  # outside a session, no default
            ["new", {"name": "bad name!"}],
            ["new", {"name": "exp"}],
            ["fork", {"session": "exp", "new_name": "exp"}],
            ["kv_get", {"session": "exp", "key": "missing"}],
            ["kv_get", {"session": "exp"}],  # a required argument left out
            ["kv_set", {"session": "exp", "key": "", "value": 1}],
            ["diff", {"session": "exp", "stat": "not a bool"}],
            ["log", {"session": "exp", "ops": ["explode"]}],
            ["apply", {"session": "exp", "test": "true", "target": "patch"}],
            ["apply", {"session": "exp", "target": "worktree"}],
            ["discard", {"session": "exp", "paths": []}],
            ["run", {"session": "exp", "command": []}],
            ["no_such_tool", {}],
            ["apply", {"session": "exp", "test": "  "}],
            ["run", {"session": "exp", "command": ["echo", "a\0b"]}],
            ["rewind", {"session": "exp", "checkpoint": 1 << 64}],
            ["fork", {"session": "exp", "new_name": "f", "at": 1 << 64}],
            ["rewind", {"session": "exp", "checkpoint": 1, "paths": []}],
            ["sessions", {}],  # and the server still answers
        ],
        errlog,
    )
    *errors, last = answers
    assert [n for n, (is_error, _) in enumerate(errors) if not is_error] == [], errors
    assert [s["name"] for s in ok(last)] == ["exp"]
    assert errors[0][1] == cli_error(repo, "show", "nosuch")
    assert errors[2][1] == cli_error(repo, "new", "bad name!")
    assert errors[3][1] == cli_error(repo, "new", "exp")
    assert errors[5][1] == cli_error(repo, "kv", "exp", "get", "missing")
    # a message that asks for an option names the tool's argument, not the command's flag
    assert errors[15][1] == "the test argument needs a command"
    # (each was "Error executing tool ...", a bug's answer)
    assert errors[16][1] == "a command's arguments cannot hold a NUL character"
    huge = f"no checkpoint {1 << 64} in this session (gitsess checkpoints lists them)"
    assert errors[17][1] == errors[18][1] == huge
    assert errors[19][1].startswith("paths is empty")  # (it rewound the whole session)
    assert cli_error(repo, "apply", "exp", "--commit", "--test", "  ") == "--test needs a command"
    # (the SDK's own argument checks, 6, 8 and 11, answer pydantic's several lines)
    sdk = (6, 8, 11)
    assert [n for n, (_, text) in enumerate(errors) if "\n" in text and n not in sdk] == []
    assert _state(repo) == state
    assert "Traceback" not in errlog.read_text()


def test_inside_a_session_the_tools_default_to_it(repo: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "server.err"
    plan = [["show", {}], ["kv_set", {"key": "from", "value": "inside"}], ["diff", {}]]
    done = gitsess(
        repo, "run", "-s", "inside", "--", sys.executable, str(AGENT), json.dumps(plan),
        str(errlog),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    *answers, refused = json.loads(done.stdout)
    shown, stored = (ok(a) for a in answers)
    # as `gitsess diff` inside a run would be: the real tree is out of reach there
    assert refused[0] and "cannot run inside a session's run" in refused[1]
    assert shown["name"] == "inside"
    assert stored == {"key": "from", "value": "inside"}
    assert gitsess(repo, "kv", "inside", "get", "from").stdout == "inside\n"


CALC = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n" + "#\n" * 6


@pytest.mark.timeout(400)
def test_two_agents_collide_the_radar_sees_it_and_the_gate_keeps_the_branch_green(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "calc.py").write_text(CALC)
    git(repo, "add", "calc.py")
    git(repo, "commit", "-q", "-m", "calc")
    errlog = tmp_path / "server.err"
    # One renames add() to plus(); the other adds a call of add() at the end: each alone runs,
    # the two merge without a textual conflict, and the merge fails.
    rename = "sed -i 's/add(/plus(/g' calc.py"
    extend = "printf 'print(add(3, 4))\\n' >> calc.py"
    for name, edit in (("one", rename), ("two", extend)):
        made = agent(
            repo,
            [["new", {"name": name}], ["run", {"session": name, "command": ["sh", "-c", edit]}]],
            errlog,
        )
        assert ok(made[1])["exit_code"] == 0
    radar = ok(agent(repo, [["overlaps", {}]], errlog)[0])
    assert radar == [
        {"name": "one", "other": "two", "kind": "session", "paths": ["calc.py"],
         "conflict": False, "conflicts": []},
    ]  # fmt: skip
    tip = git(repo, "rev-parse", "main")
    test = f"{sys.executable} calc.py"
    first = ok(
        agent(repo, [["apply", {"session": "one", "test": test, "message": "one"}]], errlog)[0]
    )
    assert first["ok"] is True and first["test"]["output"] == "3\n"
    second = ok(
        agent(repo, [["apply", {"session": "two", "test": test, "message": "two"}]], errlog)[0]
    )
    assert second["ok"] is False and second["test"]["exit_code"] == 1
    assert "NameError" in second["test"]["output"]
    assert "  | NameError: name 'add' is not defined" in gitsess(repo, "log", "two").stdout
    assert git(repo, "log", "--format=%s", f"{tip}..main").splitlines() == ["one"]
    assert git(repo, "rev-parse", "main^") == tip
    assert (repo / "calc.py").read_text() == CALC.replace("add(", "plus(")
    assert gitsess(repo, "diff", "two", "--name-only").stdout == "calc.py\n"


def test_run_kills_a_command_past_its_timeout(repo: Path, tmp_path: Path) -> None:
    assert gitsess(repo, "new", "slow").returncode == 0
    plan = [["run", {"session": "slow", "command": ["sleep", "7731"], "timeout": 2}]]
    ran = ok(agent(repo, plan, tmp_path / "server.err")[0])
    assert (ran["timed_out"], ran["exit_code"]) == (True, -9)
    # the command went with the `gitsess run` that ran it
    left = subprocess.run(["pgrep", "-f", "sleep 7731"], capture_output=True, check=False)
    assert left.stdout == b""
    # a timeout past what a wait can hold is no limit (it was "Error executing tool run")
    plan = [["run", {"session": "slow", "command": ["true"], "timeout": 1e308}]]
    ran = ok(agent(repo, plan, tmp_path / "server.err")[0])
    assert (ran["timed_out"], ran["exit_code"]) == (False, 0)
    known = vocabulary()
    assert [k for _, k, v in keys(ran) if k not in known or not fits(v, known[k])] == []


@pytest.mark.timeout(400)
def test_checkpoint_undo_and_rewind_answer_what_the_cli_json_gives(
    repo: Path, tmp_path: Path
) -> None:
    errlog = tmp_path / "server.err"
    answers = agent(
        repo,
        [
            ["new", {"name": "cp"}],
            ["run", {"session": "cp", "command": ["sh", "-c", "echo good > f"]}],
            ["checkpoint", {"session": "cp", "message": "good"}],
            ["checkpoint", {"session": "cp", "message": "again"}],  # (as its description says)
            ["run", {"session": "cp", "command": ["sh", "-c", "echo bad > f"]}],
            ["undo", {"session": "cp"}],
            ["rewind", {"session": "cp", "checkpoint": 999}],
            ["checkpoints", {"session": "cp"}],
        ],
        errlog,
    )
    made, again = ok(answers[2]), ok(answers[3])
    assert made["name"] == "cp" and isinstance(made["checkpoint"], int)
    assert again["checkpoint"] == made["checkpoint"] + 1
    del answers[3]
    undone = ok(answers[4])
    assert undone["kind"] == "undo" and undone["name"] == "cp"
    assert gitsess(repo, "fs", "cp", "cat", "f").stdout == "good\n"
    is_error, text = answers[5]
    assert is_error and text == cli_error(repo, "rewind", "cp", "999")
    assert ok(answers[6]) == cli_json(repo, "checkpoints", "cp", "--json")
    # the undo is itself undone, through the rewind tool: the bad run's state comes back
    back = agent(repo, [["rewind", {"session": "cp", "checkpoint": undone["before"]}]], errlog)
    assert ok(back[0])["checkpoint"] == undone["before"]
    assert gitsess(repo, "fs", "cp", "cat", "f").stdout == "bad\n"
    assert "Traceback" not in errlog.read_text()


def test_log_leaves_out_gits_own_files_as_the_cli_json_does(repo: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "server.err"
    assert gitsess(repo, "new", "g").returncode == 0
    ran = gitsess(repo, "run", "-s", "g", "--", "sh", "-c", "echo x > f && git add f")
    assert ran.returncode == 0, ran.stderr
    plan = [["log", {"session": "g"}], ["log", {"session": "g", "git": True}]]
    plain, with_git = (ok(a) for a in agent(repo, plan, errlog))

    def cli_log(*args: str) -> list[Any]:
        return [
            json.loads(line)
            for line in gitsess(repo, "log", "g", "--json", *args).stdout.splitlines()
        ]

    # (.git/index.lock and the like were listed: the CLI lists them only with --git)
    assert plain == cli_log() and {e["path"] for e in plain} == {"f"}
    assert with_git == cli_log("--git") and ".git/index.lock" in {e["path"] for e in with_git}
    assert "Traceback" not in errlog.read_text()
