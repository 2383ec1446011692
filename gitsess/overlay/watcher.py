"""Watch the real worktree so the view never serves stale caches of paths the session left alone.

The watch excludes the worktree's `.git` directory: the state directory, and every session's
mount point with it, lives there, and a recursive watch would walk into mounted views.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import watchfiles

OnChange = Callable[[set[bytes]], None]


class LowerWatcher:
    def __init__(self, root: bytes, on_change: OnChange) -> None:
        self.root = root
        self.on_change = on_change
        self._stop = threading.Event()
        self._deep_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._dirs: list[bytes] = []

    def start(self) -> None:
        self._spawn(self._watch_top)
        self._restart_deep()

    def stop(self) -> None:
        self._stop.set()
        self._deep_stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _spawn(self, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, daemon=True, name="gitsess-watch")
        t.start()
        self._threads.append(t)

    def _top_dirs(self) -> list[bytes]:
        try:
            entries = list(os.scandir(self.root))
        except OSError:
            return []
        return [
            os.fsencode(e.path)
            for e in entries
            if e.name != b".git" and e.is_dir(follow_symlinks=False)
        ]

    def _restart_deep(self) -> None:
        self._deep_stop.set()
        self._deep_stop = threading.Event()
        dirs = self._dirs = sorted(self._top_dirs())
        if dirs:
            stop = self._deep_stop
            self._spawn(lambda: self._watch(dirs, recursive=True, stop=stop))

    def _watch_top(self) -> None:
        self._watch([self.root], recursive=False, stop=self._stop, top=True)

    def _watch(
        self, paths: list[bytes], *, recursive: bool, stop: threading.Event, top: bool = False
    ) -> None:
        try:
            for changes in watchfiles.watch(
                *[os.fsdecode(p) for p in paths],
                recursive=recursive,
                stop_event=stop,
                debounce=30,
                # Each step takes the GIL from the thread serving the filesystem.
                step=50,
                raise_interrupt=False,
                ignore_permission_denied=True,
            ):
                rels = {self._rel(path) for _, path in changes}
                rels.discard(None)
                if top and not self._stop.is_set() and sorted(self._top_dirs()) != self._dirs:
                    self._restart_deep()
                self.on_change({r for r in rels if r is not None})
        except (OSError, RuntimeError):
            # A watched directory vanished: the top-level watch sees that and restarts us.
            return

    def _rel(self, path: str) -> bytes | None:
        raw = os.fsencode(path)
        if not raw.startswith(self.root + b"/"):
            return None
        rel = raw[len(self.root) + 1 :]
        if rel == b".git" or rel.startswith(b".git/"):
            return None
        return rel
