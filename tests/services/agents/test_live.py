"""Agents in a mounted session, through the real program: fake claude and cline CLIs run by
`gitsess run --agent ... --role ...`, several at once in one session."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gitsess.git.repo import discover
from gitsess.runtime import mount
from gitsess.services import sessions
from gitsess.services.agents.roots import homes_dir
from tests.live_util import eventually
from tests.util import GITSESS, gitsess

from .conftest import Snapshot

pytestmark = pytest.mark.fuse

KINDS = {"c1": "claude", "c2": "claude", "l1": "cline", "l2": "cline"}
TIMEOUT = 60.0


@dataclass
class Live:
    """One session `S`, and the `gitsess run` processes a test starts in it."""

    repo: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, role: str, *args: str) -> subprocess.Popen[str]:
        kind = KINDS[role]
        argv = [*GITSESS, "run", "-s", "S", "--agent", kind, "--role", role, "--", kind, *args]
        proc = subprocess.Popen(
            argv,
            cwd=self.repo,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def result(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        data: dict[str, Any] = json.loads(out.splitlines()[-1])
        return data

    def run(self, role: str, *args: str) -> dict[str, Any]:
        return self.result(self.start(role, *args))

    def gitsess(self, *args: str) -> subprocess.CompletedProcess[str]:
        return gitsess(self.repo, *args, env=self.env)

    def agents(self) -> dict[str, dict[str, Any]]:
        done = self.gitsess("agents", "S", "--json")
        assert done.returncode == 0, done.stderr
        return {row["role"]: row for row in json.loads(done.stdout)}

    def wait_ready(self, files: list[Path]) -> None:
        """Until every agent said it is running (and fail early if one died instead)."""
        deadline = time.monotonic() + TIMEOUT
        while not all(f.exists() for f in files):
            for proc in self.procs:
                if proc.poll() is not None:
                    pytest.fail(f"{proc.args!r} exited early: {proc.communicate()[1]}")
            assert time.monotonic() < deadline, "the agents did not start"
            time.sleep(0.05)


@pytest.fixture
def live(repo: Path, fake_bin: Path) -> Iterator[Live]:
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    assert gitsess(repo, "new", "S").returncode == 0
    session_id = sessions.resolve(discover(repo), "S").id
    state = Live(repo, env)
    try:
        yield state
    finally:
        for proc in state.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        gitsess(repo, "umount", "S")
        assert mount.status(discover(repo).session_dir(session_id)) is None


def test_four_agents_in_one_session_keep_their_own_conversations(
    live: Live, tmp_path: Path, originals: Callable[[], Snapshot]
) -> None:
    before = originals()
    go = tmp_path / "go"
    ready = {role: tmp_path / f"ready-{role}" for role in KINDS}
    procs = {
        role: live.start(
            role, "--say", f"hello {role}", "--ready", str(ready[role]), "--until", str(go)
        )
        for role in KINDS
    }
    live.wait_ready(list(ready.values()))

    rows = live.agents()
    assert {role: row["status"] for role, row in rows.items()} == dict.fromkeys(KINDS, "running")
    assert len({row["root"] for row in rows.values()}) == 4
    twice = live.gitsess("run", "-s", "S", "--role", "c1", "--", "claude")
    assert twice.returncode == 1
    assert f"role c1 is already running in session S (pid {procs['c1'].pid})" in twice.stderr

    go.touch()
    first = {role: live.result(proc) for role, proc in procs.items()}
    assert len({r["conversation"] for r in first.values()}) == 4
    for role, r in first.items():
        assert r["state"] == rows[role]["root"]
        assert r["messages"] == [f"hello {role}"]
    # Stored where the real CLIs store them: under the lever's directory, keyed by the cwd.
    assert (Path(first["c1"]["state"]) / "projects" / str(live.repo).replace("/", "-")).is_dir()
    assert (Path(first["l1"]["state"]) / "sessions").is_dir()  # as cline --data-dir has them

    resumed = {role: live.start(role, "--continue", "--say", f"again {role}") for role in KINDS}
    for role, proc in resumed.items():
        again = live.result(proc)
        assert again["conversation"] == first[role]["conversation"]
        assert again["messages"] == [f"hello {role}", f"again {role}"]

    for role in KINDS:
        done = live.gitsess("stop", "S", "--role", role)
        assert done.returncode == 0, done.stderr
        assert not Path(first[role]["state"]).exists()
    assert live.agents() == {}
    assert originals() == before


def test_a_refresh_by_one_agent_reaches_the_others(
    live: Live, tmp_path: Path, originals: Callable[[], Snapshot], home: Path
) -> None:
    originals()
    go = tmp_path / "go"
    ready = [tmp_path / "ready-c2", tmp_path / "ready-l1"]
    c2 = live.start("c2", "--ready", str(ready[0]), "--until", str(go))
    l1 = live.start("l1", "--ready", str(ready[1]), "--until", str(go))
    live.wait_ready(ready)

    # The CLI renames a new credential over its link and waits until gitsess links it again,
    # which the watcher does while the agents run.
    c1 = live.run("c1", "--refresh", "claude-token-2", "--wait-relink")
    assert c1["token"] == "claude-token-2"
    assert (home / ".claude/.credentials.json").read_text() == "claude-token-2"
    c2_credential = Path(live.agents()["c2"]["root"]) / ".credentials.json"
    assert c2_credential.is_symlink() and c2_credential.read_text() == "claude-token-2"
    go.touch()
    assert live.result(c2)["token"] == "claude-token-2"
    assert live.result(l1)["token"] == "cline-token-1"  # cline's login is another file

    # A refresh just before the CLI exits is taken in before `gitsess run` returns.
    l2 = live.run("l2", "--refresh", "cline-token-2")
    assert (home / ".cline/data/secrets.json").read_text() == "cline-token-2"
    assert (Path(l2["state"]) / "secrets.json").is_symlink()
    assert live.run("l1", "--continue")["token"] == "cline-token-2"


def test_a_run_without_an_agent_is_left_alone(live: Live, home: Path) -> None:
    done = live.gitsess(
        "run",
        "-s",
        "S",
        "--",
        "sh",
        "-c",
        'echo "$HOME|${GITSESS_ROLE-none}|${CLAUDE_CONFIG_DIR-none}"',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{home}|none|none\n"
    assert live.agents() == {}
    assert not homes_dir(discover(live.repo).state_dir).exists()


def test_a_role_whose_run_was_killed_can_start_again(live: Live, tmp_path: Path) -> None:
    """kill -9 of `gitsess run`: the run's PID namespace ends with it, so even a process the
    agent moved out of the run's process group is gone, the role is idle, and it starts
    again at once (no "already running" naming the dead wrapper)."""
    ready, until = tmp_path / "ready", tmp_path / "until"
    script = f"setsid claude --ready {ready} --until {until} & wait"
    argv = [*GITSESS, "run", "-s", "S", "--agent", "claude", "--role", "c1", "--", "sh", "-c",
            script]  # fmt: skip
    wrapper = subprocess.Popen(argv, cwd=live.repo, env=live.env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    live.procs.append(wrapper)
    live.wait_ready([ready])
    wrapper.kill()
    wrapper.wait()
    assert eventually(lambda: live.agents()["c1"]["status"] == "idle")
    again = live.gitsess("run", "-s", "S", "--agent", "claude", "--role", "c1", "--", "true")
    assert again.returncode == 0, again.stderr
    until.write_text("")


def test_each_claude_turn_makes_a_checkpoint_named_after_its_prompt(live: Live) -> None:
    live.run("c1", "--say", "fix the parser")
    live.run("c1", "--continue", "--say", "now the tests\nwith more lines")
    done = live.gitsess("checkpoints", "S", "--json")
    assert done.returncode == 0, done.stderr
    turns = [c for c in json.loads(done.stdout)["checkpoints"] if c["kind"] == "turn"]
    assert [(c["message"], c["role"]) for c in turns] == [
        ("fix the parser", "c1"),
        ("now the tests", "c1"),
    ]


def test_the_agent_is_given_gitsess_mcp_server_unless_no_mcp(live: Live) -> None:
    given = live.run("c1")["mcp"]
    server = given["mcpServers"]["gitsess"]
    assert server["args"] == ["-m", "gitsess", "mcp"]
    # the registered command starts a server that answers (its --help, as a smoke check)
    helped = subprocess.run([server["command"], *server["args"], "--help"], capture_output=True)
    assert helped.returncode == 0 and b"MCP" in helped.stdout
    argv = [*GITSESS, "run", "-s", "S", "--agent", "claude", "--no-mcp", "--", "claude"]
    done = subprocess.run(argv, cwd=live.repo, env=live.env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["mcp"] is None
