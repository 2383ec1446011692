"""Every command's JSON keys come from docs/json.md, each with the type it declares there."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gitsess.cli.group import cli
from tests.live_util import eventually
from tests.util import GITSESS

DOC = Path(__file__).resolve().parents[2] / "docs" / "json.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| ([a-z, ]+) \|", re.MULTILINE)
# Values whose keys are the user's or a profile's, not gitsess's vocabulary.
FREE = {"lever", "ops", "value"}
TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}


def vocabulary() -> dict[str, list[str]]:
    return {key: types.split(", ") for key, types in ROW.findall(DOC.read_text())}


def keys(data: object, at: str = "") -> Iterator[tuple[str, str, object]]:
    """(where, key, value) for every key of every object in `data`, however deep."""
    if isinstance(data, list):
        for item in data:
            yield from keys(item, at)
    elif isinstance(data, dict):
        for key, value in data.items():
            yield at, key, value
            if key not in FREE:
                yield from keys(value, f"{at}.{key}")


def fits(value: object, types: list[str]) -> bool:
    if value is None or "any" in types:
        return True
    # bool is an int to Python, not to JSON
    return any(
        isinstance(value, TYPES[t]) and not (t in ("integer", "number") and isinstance(value, bool))
        for t in types
    )


def test_the_vocabulary_is_read_from_the_doc() -> None:
    found = vocabulary()
    assert found["name"] == ["string"] and found["kept"] == ["boolean", "array"]
    assert "session_id" not in found and "persistent" not in found and "base" not in found


def test_every_commands_json_speaks_the_vocabulary(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    runner = CliRunner()

    def run(*args: str) -> list[object]:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        text = result.stdout.strip()
        try:
            return [json.loads(text)]
        except json.JSONDecodeError:
            return [json.loads(line) for line in text.splitlines()]

    outputs = {
        "new": run("new", "exp", "-t", "an idea", "--json"),
        "kv set": run("kv", "exp", "set", "k", "v"),
        "ls": run("ls", "--json"),
        "ls -a": run("ls", "--everywhere", "--json"),
        "show": run("show", "exp", "--json"),
        "title": run("title", "exp", "a better idea", "--json"),
        "rename": run("rename", "exp", "idea", "--json"),
        "fork": run("fork", "idea", "copy", "--json"),
        "kv ls": run("kv", "idea", "ls", "--json"),
        "checkpoint": run("checkpoint", "idea", "-m", "mark", "--json"),
        "checkpoints": run("checkpoints", "idea", "--json"),
        "rewind": run("rewind", "idea", "1", "--json"),
        "undo": run("undo", "idea", "--json"),
        "fs ls": run("fs", "idea", "ls", "--json"),
        "fs stat": run("fs", "idea", "stat", "README.md", "--json"),
        "diff": run("diff", "idea", "--json"),
        "apply": run("apply", "idea", "--patch", "--dry-run", "--json", "-o", "x.patch"),
        "discard": run("discard", "idea", "-y", "--json"),
        "log": run("log", "idea", "--json"),
        "ps": run("ps", "--json"),
        "agents": run("agents", "--json"),
        "umount": run("umount", "idea", "--json"),
        "archives": run("archives", "--json"),
        "doctor": run("doctor", "--json"),
        "rm": run("rm", "copy", "--json"),
    }
    known = vocabulary()
    wrong = [
        f"{command}: {at}.{key} = {value!r}"
        for command, documents in outputs.items()
        for document in documents
        for at, key, value in keys(document)
        if key not in known or not fits(value, known[key])
    ]
    assert wrong == [], "\n".join(wrong)
    seen = {key for documents in outputs.values() for _, key, _ in keys(documents)}
    assert {"name", "id", "changed_files", "status", "base_commit", "updated_at"} <= seen


def test_a_key_outside_the_vocabulary_is_caught() -> None:
    known = vocabulary()
    stray = [k for _, k, _ in keys([{"name": "x", "session": "x"}]) if k not in known]
    assert stray == ["session"]
    assert not fits("synced", known["here"])


def test_a_stray_daemon_in_ps_speaks_the_vocabulary() -> None:
    """`ps --json` lists daemons whose view is gone too: rarely seen, so checked here."""
    from gitsess.cli.live_cmds import stray_json
    from gitsess.services.live import Stray

    known = vocabulary()
    row = stray_json(Stray(1234, "f3883b6f", "/gone/delta.db", "its view is gone"))
    assert [k for _, k, v in keys([row]) if k not in known or not fits(v, known[k])] == []


@pytest.mark.fuse
def test_ps_json_of_a_participant_speaks_the_vocabulary(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The participants are the daemon's: its `run_id` and `joined_at` (seconds) went out as
    they were."""
    monkeypatch.chdir(repo)
    inside = subprocess.Popen([*GITSESS, "run", "-s", "busy", "--", "sleep", "7732"], cwd=repo)
    try:

        def listed() -> list[dict[str, object]]:
            done = CliRunner().invoke(cli, ["ps", "--json"], catch_exceptions=False)
            rows: list[dict[str, object]] = json.loads(done.stdout)
            return [p for row in rows for p in row["participants"]]  # type: ignore[attr-defined]

        assert eventually(lambda: len(listed()) == 1)
        (participant,) = listed()
        known = vocabulary()
        assert [
            k for _, k, v in keys([participant]) if k not in known or not fits(v, known[k])
        ] == []
        assert participant["command"] == ["sleep", "7732"] and isinstance(participant["run"], int)
    finally:
        inside.terminate()
        inside.wait(timeout=60)


@pytest.mark.fuse
def test_a_gated_apply_speaks_the_vocabulary(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its `test` and `now_conflicts` were in no row of docs/json.md."""
    monkeypatch.chdir(repo)
    ran = subprocess.run([*GITSESS, "run", "-s", "g", "--", "sh", "-c", "echo x > f"], cwd=repo)
    assert ran.returncode == 0
    args = ["apply", "g", "--commit", "-m", "m", "--test", "exit 3", "--json"]
    done = CliRunner().invoke(cli, args, catch_exceptions=False)
    outcome = json.loads(done.stdout)
    assert outcome["ok"] is False and outcome["test"]["exit_code"] == 3
    known = vocabulary()
    assert [k for _, k, v in keys(outcome) if k not in known or not fits(v, known[k])] == []
