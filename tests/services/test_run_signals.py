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


def _by_arguments(argv: list[str]) -> int | None:
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if entry.isdigit() and f.read() == wanted:
                    return int(entry)
        except OSError:
            continue
    return None


def _alive(pid: int) -> bool:
    """Running, not a zombie; a process reaped while its stat is read is gone too."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


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
    # Found by its arguments: `$$` inside is its pid in the run's own PID namespace.
    marker = f"300.{os.getpid()}{int(time.time() * 1000) % 100000}"
    proc = _start(repo, f"touch {repo.parent / 'started'}; exec sleep {marker}")
    assert eventually(lambda: _by_arguments(["sleep", marker]) is not None)
    child = _by_arguments(["sleep", marker])
    assert child is not None
    proc.kill()
    proc.wait(timeout=10)
    assert eventually(lambda: not _alive(child), timeout=10)
    usage = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
    assert usage["running"] == 0
    first = usage["run_seconds"]
    time.sleep(1.2)
    again = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
    assert again["run_seconds"] == first  # the totals stop growing
