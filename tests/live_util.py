"""Helpers for tests of sessions: scripted runs, JSON output, followers as subprocesses, and
the program run in process where no real process is needed (no interpreter start per call)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gitsess.cli import main
from gitsess.git.repo import discover
from gitsess.runtime import mount

from .util import GITSESS, gitsess


def call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`gitsess ARGS` in this process, in the current directory: exit code, stdout, stderr."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    code = exited.value.code
    return code if isinstance(code, int) else 1, out, err


class InProcess:
    """gitsess in this process, in the current directory."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def ok(self, *args: str) -> str:
        """The stdout of a command that must succeed."""
        code, out, err = call(self.capsys, *args)
        assert code == 0, err
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    def lines(self, *args: str) -> list[dict[str, Any]]:
        """The JSON lines of `ARGS --json`."""
        return json_lines(self.ok(*args, "--json"))

    def fails(self, *args: str) -> str:
        """The one line of stderr of a command that must fail."""
        code, out, err = call(self.capsys, *args)
        assert code == 1, out
        assert err.count("\n") == 1, err
        return err


def unmount_all(repo: Path) -> None:
    """Stop the daemon of every session of `repo` (each started by the test that owns `repo`)."""
    sessions_dir = discover(repo).sessions_dir
    for session_dir in sessions_dir.glob("*") if sessions_dir.exists() else []:
        mount.stop(session_dir, session_dir / "mnt")


def run(
    repo: Path, session: str, script: str, *, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`gitsess run -s SESSION -- sh -c SCRIPT`, which must succeed."""
    done = gitsess(cwd or repo, "run", "-s", session, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done


def start_run(repo: Path, session: str, script: str) -> subprocess.Popen[str]:
    """`gitsess run -s SESSION -- sh -c SCRIPT` started, its output piped; the caller waits
    for it (or kills it)."""
    return subprocess.Popen(
        [*GITSESS, "run", "-s", session, "--", "sh", "-c", script],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def eventually(check: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether `check` comes true in time (the machines that run the tests are often loaded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


class Follower:
    """A long-running gitsess command whose output lines are collected as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.arrivals: list[int] = []  # time.time_ns() when each line of stdout came
        self.errors: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None and proc.stderr is not None
        threading.Thread(target=self._pump, args=(proc.stdout, self._line)).start()
        threading.Thread(target=self._pump, args=(proc.stderr, self.errors.put)).start()

    def _line(self, line: str) -> None:
        self.arrivals.append(time.time_ns())
        self.lines.append(line)

    @staticmethod
    def _pump(stream: Any, put: Callable[[str], None]) -> None:
        for line in stream:
            put(line)

    def wait_for_stderr(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                line = self.errors.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, f"exited: {''.join(seen)}"
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"never said {text!r}: {''.join(seen)}")

    def records(self) -> list[dict[str, Any]]:
        return json_lines("".join(self.lines))

    def stop(self) -> int:
        """^C, as a person would; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextmanager
def follower(repo: Path, *args: str) -> Iterator[Follower]:
    """`gitsess ARGS` running in the background, stopped (and only it) when the block ends."""
    proc = subprocess.Popen(
        [*GITSESS, *args],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    f = Follower(proc)
    try:
        yield f
    finally:
        f.stop()
