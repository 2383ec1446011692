"""The daemon's side of the lower watch (the watch of the real worktree): runs
`lower_watch_process` and hands its batches of changed paths (relative to the worktree) to a
callback, from a thread of its own; another callback hears when the watch is in place, a third
when the watch ended without being asked to (killed, out of memory), before it is started
again. `sync` returns once every change made before it was handed to the first callback (git's
fsmonitor answers must hold every change made before the query)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable

from gitsess.overlay.lower_watch_process import SYNCED

OnChange = Callable[[set[bytes]], None]
OnReady = Callable[[], None]
OnLost = Callable[[], None]


class LowerWatcher:
    def __init__(
        self, root: bytes, on_change: OnChange, on_ready: OnReady, on_lost: OnLost
    ) -> None:
        self.root = root
        self.on_change = on_change
        self.on_ready = on_ready
        self.on_lost = on_lost
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        # A restart from the reader against stop(); syncs wait on it for their answers.
        self._lock = threading.Condition()
        self._stopping = False
        # Of the running watch process: whether its watch is in place, how many syncs were
        # asked of it and how many it answered (in order).
        self._in_place = False
        self._asked = 0
        self._answered = 0

    def start(self) -> None:
        with self._lock:
            self._spawn()

    def _spawn(self) -> None:
        self._in_place = False
        self._asked = self._answered = 0
        proc = self._proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "gitsess.overlay.lower_watch_process", self.root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._reader = threading.Thread(
            target=self._read, args=(proc,), daemon=True, name="gitsess-watch"
        )
        self._reader.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            proc, reader = self._proc, self._reader
        if proc is None:
            return
        _end(proc)
        if reader is not None:
            reader.join(timeout=5)

    def sync(self, timeout: float) -> bool:
        """Wait until the watch has reported every change made before this call; False when
        there is no watch in place, or it did not answer within `timeout` seconds."""
        with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or not self._in_place or self._stopping:
                return False
            try:
                os.write(proc.stdin.fileno(), b"s")
            except OSError:
                return False
            self._asked += 1
            mine = self._asked
            self._lock.wait_for(
                lambda: self._proc is not proc or not self._in_place or self._answered >= mine,
                timeout,
            )
            return self._proc is proc and self._answered >= mine

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        pending = b""
        batch: set[bytes] = set()
        in_place = False
        while chunk := os.read(fd, 65536):
            *names, pending = (pending + chunk).split(b"\0")
            for name in names:
                if name == SYNCED:
                    with self._lock:
                        self._answered += 1
                        self._lock.notify_all()
                elif name:
                    batch.add(name)
                elif batch:
                    self.on_change(batch)
                    batch = set()
                else:
                    in_place = True
                    self.on_ready()
                    with self._lock:
                        self._in_place = True
        with self._lock:
            self._in_place = False
            self._lock.notify_all()
        _end(proc)
        # A watch that could not be set up (it exits saying why on stderr) is not tried
        # again: the view stays at its short cache timeouts. One that was in place, or was
        # killed, is started again.
        if self._stopping or (not in_place and proc.returncode >= 0):
            return
        self.on_lost()
        with self._lock:
            if not self._stopping:
                self._spawn()


def _end(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
