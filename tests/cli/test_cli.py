"""The command line in process: parsing, session spellings, rendering, JSON."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import apsw
import pygit2
import pytest
from click.testing import CliRunner, Result

import gitsess.cli
from gitsess.cli.group import COMMANDS, _library_error, cli
from tests.util import GITSESS, git, make_repo


@pytest.fixture
def run(repo: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.chdir(repo)
    return CliRunner()


def ok(runner: CliRunner, *args: str) -> Result:
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def sessions_json(runner: CliRunner) -> list[dict[str, object]]:
    data = json.loads(ok(runner, "ls", "--json").output)
    assert isinstance(data, list)
    return data


@pytest.fixture
def three(run: CliRunner) -> CliRunner:
    for name in ("one", "two", "three"):
        ok(run, "new", name)
    return run


def test_new_prints_what_it_made(run: CliRunner, repo: Path) -> None:
    out = ok(run, "new", "exp", "--title", "an idea").output
    assert "Created session exp" in out and "on main" in out and str(repo) in out
    [row] = sessions_json(run)
    assert (row["name"], row["title"], row["offset"], row["here"]) == ("exp", "an idea", -1, True)
    assert row["changed_files"] is None


def test_new_json_is_the_session(run: CliRunner) -> None:
    made = json.loads(ok(run, "new", "exp", "--read-only", "--json").output)
    assert made["name"] == "exp" and made["read_only"] is True and made["seq"] == 1


def test_new_worktree_with_and_without_branch(run: CliRunner, repo: Path) -> None:
    ok(run, "new", "a", "--worktree")
    ok(run, "new", "b", "--worktree", "topic", "--from", "HEAD")
    branches = {row["name"]: row["branch"] for row in sessions_json(run)}
    assert branches == {"a": "gitsess/a", "b": "topic"}
    assert git(repo, "rev-parse", "topic") == git(repo, "rev-parse", "HEAD")


def test_from_needs_worktree(run: CliRunner) -> None:
    result = run.invoke(cli, ["new", "x", "--from", "HEAD"])
    assert result.exit_code == 2
    assert "--from only applies with --worktree" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["show", "-2"],
        ["show", "-s", "-2"],
        ["show", "--session", "-2"],
        ["show", "--session=-2"],
        ["show", "-s-2"],
        ["show", "two"],
        ["show", "-s", "two"],
        ["show", "--json", "-2"],
        ["show", "-2", "--json"],
    ],
)
def test_session_in_any_spelling(three: CliRunner, args: list[str]) -> None:
    out = ok(three, *args).output
    assert "two" in out and "three" not in out


def test_offset_as_positional_before_other_arguments(three: CliRunner) -> None:
    ok(three, "rename", "-3", "uno")
    ok(three, "title", "-1", "newest")
    ok(three, "title", "--session", "-2", "middle")
    rows = {row["name"]: row["title"] for row in sessions_json(three)}
    assert rows == {"uno": "", "two": "middle", "three": "newest"}


def test_offset_after_double_dash_is_an_argument(three: CliRunner) -> None:
    ok(three, "title", "two", "--", "-5")
    assert {r["name"]: r["title"] for r in sessions_json(three)}["two"] == "-5"


def test_session_given_twice_is_a_usage_error(three: CliRunner) -> None:
    for args in (["show", "-1", "-2"], ["show", "one", "-s", "two"], ["rm", "-1", "-s", "-1"]):
        result = three.invoke(cli, args)
        assert result.exit_code == 2, args
        assert "give one session" in result.output
    assert len(sessions_json(three)) == 3


def test_wrong_argument_count_is_a_usage_error(three: CliRunner) -> None:
    result = three.invoke(cli, ["rename", "a", "b", "c"])
    assert result.exit_code == 2 and "expected 1 argument" in result.output


def test_environment_session_is_the_default(three: CliRunner) -> None:
    ids = {row["name"]: row["id"] for row in sessions_json(three)}
    result = three.invoke(cli, ["show", "--json"], env={"GITSESS_SESSION": str(ids["one"])})
    assert json.loads(result.output)["name"] == "one"


def test_ls_groups_this_worktree_first(three: CliRunner, repo: Path, tmp_path: Path) -> None:
    ok(three, "new", "side", "--worktree")
    out = ok(three, "ls").output
    here, others = out.split("Other worktrees")
    assert "This worktree" in here
    assert all(name in here for name in ("one", "two", "three"))
    assert "side" in others and "gitsess/side" in others and "side" not in here
    assert "-1" in others  # the offset column


def test_ls_without_sessions(run: CliRunner) -> None:
    assert "No sessions" in ok(run, "ls").output
    assert ok(run, "ls", "--json").output.strip() == "[]"


def test_ls_everywhere(three: CliRunner, tmp_path: Path) -> None:
    out = ok(three, "ls", "--everywhere").output
    assert ".git" in out and "three" in out
    [repo] = json.loads(ok(three, "ls", "-a", "--json").output)
    assert [s["name"] for s in repo["sessions"]] == ["one", "two", "three"]
    assert repo["error"] is None


def test_show_fields(three: CliRunner, repo: Path) -> None:
    out = ok(three, "show", "one").output
    for label in ("name", "id", "worktree", "branch", "base commit", "session dir", "offset"):
        assert label in out
    shown = json.loads(ok(three, "show", "one", "--json").output)
    assert shown["worktree"] == str(repo)
    assert shown["offset"] == -3
    assert shown["session_dir"].endswith(shown["id"])


def test_rm_rename_title_messages(three: CliRunner) -> None:
    assert "now named uno" in ok(three, "rename", "one", "uno").output
    assert "uno: a title" in ok(three, "title", "uno", "a title").output
    assert "Removed session uno" in ok(three, "rm", "uno").output
    assert [r["name"] for r in sessions_json(three)] == ["two", "three"]


def test_rm_reports_what_it_kept(run: CliRunner, repo: Path) -> None:
    ok(run, "new", "side", "--worktree")
    worktree = repo / ".git" / "gitsess" / "worktrees" / "side"
    (worktree / "wip.txt").write_text("wip\n")
    result = ok(run, "rm", "side")
    assert "kept worktree" in result.stderr and "uncommitted changes" in result.stderr
    assert worktree.exists()


def test_version_and_help(run: CliRunner) -> None:
    assert "0.1.0" in ok(run, "--version").output
    out = ok(run, "--help").output
    for command in ("new", "ls", "show", "rm", "rename", "title", "doctor", "tour"):
        assert command in out
    assert "--session-offset" not in ok(run, "show", "--help").output


def test_console_script_is_declared() -> None:
    [script] = [e for e in entry_points(group="console_scripts") if e.name == "gitsess"]
    assert script.value == "gitsess.cli:main"


EXIT_SCRIPT = """
import atexit, sys, tempfile, threading
import click
from gitsess.cli import main
from gitsess.cli.group import cli
@cli.command("exits")
@click.argument("code")
def exits(code):
    sys.exit(int(code) if code.isdigit() else code)
held = tempfile.TemporaryDirectory(prefix="gitsess-exit-")
print(held.name, flush=True)
atexit.register(lambda: print("atexit ran"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (threading.Event().wait(2.0), print("thread done"))).start()
sys.argv = ["gitsess", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("thread", ["", "thread"])
def test_the_console_script_exits_as_python_would(repo: Path, thread: str) -> None:
    """It skips the interpreter's teardown, not what an exit must do: flush its output, run
    atexit handlers and finalizers, wait for a thread that still runs, keep the exit code."""
    cases = [(["ls", "--json"], 0), (["show", "nosuch"], 1), (["exits", "3"], 3)]
    for args, code in [*cases, (["exits", "why it stopped"], 1)]:
        done = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, thread, *args],
            cwd=repo,
            capture_output=True,
            text=True,
        )
        assert done.returncode == code, done.stderr
        lines = done.stdout.splitlines()
        assert not Path(lines[0]).exists()  # the TemporaryDirectory's finalizer ran
        assert lines[-1] == "atexit ran"
        assert ("thread done" in lines) == bool(thread)
        if args[0] == "ls":
            assert json.loads("\n".join(lines[1 : -1 - bool(thread)])) == []
        elif code == 1:
            assert done.stderr.count("\n") == 1
        if args[-1] == "why it stopped":
            assert done.stderr == "why it stopped\n"


def test_a_profiled_command_still_writes_its_profile(repo: Path, tmp_path: Path) -> None:
    stats = tmp_path / "ls.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(stats), "-m", "gitsess", "ls"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert stats.stat().st_size > 0


def test_ls_everywhere_works_outside_any_repository(
    three: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    [repo] = json.loads(ok(three, "ls", "--everywhere", "--json").output)
    assert len(repo["sessions"]) == 3


def test_paths_with_spaces_and_unicode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "my repo ü")
    monkeypatch.chdir(repo / "src")
    runner = CliRunner()
    ok(runner, "new", "x", "--worktree")
    [row] = sessions_json(runner)
    assert row["worktree"] == str(repo / ".git" / "gitsess" / "worktrees" / "x")
    assert "Removed worktree" in ok(runner, "rm", "x").output


def _all_command_modules() -> list[str]:
    package = Path(gitsess.cli.__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules([str(package)]) if m.name.endswith("_cmds"))


def test_command_table_names_every_command_and_its_module() -> None:
    for module in _all_command_modules():
        importlib.import_module(f"gitsess.cli.{module}")
    assert set(COMMANDS) == set(cli.commands)
    for name, command in cli.commands.items():
        module, summary = COMMANDS[name]
        assert command.callback is not None
        assert command.callback.__module__ == f"gitsess.cli.{module}", name
        assert summary == (None if command.hidden else command.get_short_help_str(10_000)), name


def test_help_lists_every_command_without_importing_any(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    script = (
        "import sys; from click.testing import CliRunner; from gitsess.cli.group import cli;"
        "out = CliRunner().invoke(cli, ['--help']).output;"
        "print(sorted(m for m in sys.modules"
        " if m.startswith(('gitsess.cli.', 'gitsess.services.sessions', 'pygit2', 'rich'))));"
        "print(out, end='')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    imported, lazy = done.stdout.split("\n", 1)
    assert imported == "['gitsess.cli.group']"
    for module in _all_command_modules():
        importlib.import_module(f"gitsess.cli.{module}")
    assert CliRunner().invoke(cli, ["--help"]).output == lazy
    assert "  mount " in lazy and "  hook " not in lazy


def test_a_command_imports_its_module_only() -> None:
    script = (
        "import sys; from click.testing import CliRunner; from gitsess.cli.group import cli;"
        "CliRunner().invoke(cli, ['mount', '--help']);"
        "print(sorted(m for m in sys.modules if m.startswith('gitsess.cli.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [
        "['gitsess.cli.base',",
        "'gitsess.cli.group',",
        "'gitsess.cli.live_cmds']",
    ]


def test_the_entry_loads_nothing_before_the_head_start() -> None:
    """`main` starts a mounting command's daemon process before click and the commands load:
    the daemon's imports are what session start waits for."""
    script = "import sys, gitsess.cli, gitsess.runtime.prestart; print(sorted(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout.replace("'", '"')))
    assert not loaded & {"click", "gitsess.cli.group", "json", "subprocess"}


def test_unknown_command_is_a_usage_error(run: CliRunner) -> None:
    result = run.invoke(cli, ["mnt"])
    assert result.exit_code == 2
    assert "No such command 'mnt'" in result.output


def test_shell_completion_of_commands_and_options(repo: Path) -> None:
    env = {
        **os.environ,
        "_GITSESS_COMPLETE": "bash_complete",
        "COMP_WORDS": "gitsess mo",
        "COMP_CWORD": "1",
    }
    done = subprocess.run(
        [*GITSESS, "mo"], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.split() == ["plain,mount"]
    env.update(COMP_WORDS="gitsess new --m", COMP_CWORD="2")
    done = subprocess.run(
        [*GITSESS], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    assert done.stdout.split() == ["plain,--mount"]


def test_library_errors_are_one_line_messages() -> None:
    assert _library_error(apsw.BusyError("database is locked")) == (
        "session registry: database is locked"
    )
    assert _library_error(pygit2.GitError("bad ref")) == "git: bad ref"
    assert _library_error(ValueError("a bug")) is None
