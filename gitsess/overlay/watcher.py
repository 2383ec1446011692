"""The daemon's side of the worktree watch: runs `watch_process` and hands its batches of changed
paths (relative to the worktree) to a callback, from a thread of its own; another callback hears
when the watch is in place."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable

OnChange = Callable[[set[bytes]], None]
OnReady = Callable[[], None]


class LowerWatcher:
    def __init__(self, root: bytes, on_change: OnChange, on_ready: OnReady) -> None:
        self.root = root
        self.on_change = on_change
        self.on_ready = on_ready
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gitsess.overlay.watch_process", self.root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="gitsess-watch")
        self._reader.start()

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        pending = b""
        batch: set[bytes] = set()
        while chunk := os.read(fd, 65536):
            *names, pending = (pending + chunk).split(b"\0")
            for name in names:
                if name:
                    batch.add(name)
                elif batch:
                    self.on_change(batch)
                    batch = set()
                else:
                    self.on_ready()
