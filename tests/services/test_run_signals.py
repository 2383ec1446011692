"""`gitsess run` killed or signalled: the command follows it, the run ends (issue 29 item 14)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.live_util import eventually
from tests.util import GITSESS, gitsess

pytestmark = pytest.mark.fuse


def _start(repo: Path, script: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*GITSESS, "run", "-s", "exp", "--", "sh", "-c", script], cwd=repo)
    assert eventually(lambda: (repo.parent / "started").exists(), timeout=20)
    return proc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_run_reaches_the_command(repo: Path, sig: signal.Signals) -> None:
    marker = repo.parent / "got"
    script = (
        f"trap 'echo $$ > {marker}; exit 3' TERM HUP; touch {repo.parent / 'started'}; "
        "while :; do sleep 0.1; done"
    )
    proc = _start(repo, script)
    proc.send_signal(sig)
    assert proc.wait(timeout=20) == 3
    assert marker.exists()
    usage = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
    assert (usage["runs"], usage["running"]) == (1, 0)


def test_a_killed_run_takes_its_command_along_and_ends(repo: Path) -> None:
    pid_file = repo.parent / "pid"
    script = f"echo $$ > {pid_file}; touch {repo.parent / 'started'}; exec sleep 300"
    proc = _start(repo, script)
    assert eventually(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    child = int(pid_file.read_text())
    proc.kill()
    proc.wait(timeout=10)
    assert eventually(lambda: not _alive(child), timeout=10)
    usage = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
    assert usage["running"] == 0
    first = usage["run_seconds"]
    time.sleep(1.2)
    again = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
    assert again["run_seconds"] == first  # the totals stop growing
