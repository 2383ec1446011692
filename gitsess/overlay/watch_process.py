"""The worktree watch, as a process of its own: `python -m gitsess.overlay.watch_process ROOT`.

Writes every batch of changed paths (relative to ROOT) to stdout, each path ended by a NUL and
the batch by one more, after an empty batch once the watch is in place; exits when its stdin
closes (the daemon stopped or died). A process, not
a thread of the daemon: setting up a recursive watch holds the GIL for as long as the walk takes
(0.4 s on 50,000 files), which would stall the filesystem's requests.

The watch excludes the worktree's `.git` directory: the state directory, and every session's
mount point with it, lives there, and a recursive watch would walk into mounted views.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from watchfiles._rust_notify import RustNotify

OnChange = Callable[[set[bytes]], None]


def _notify(paths: list[bytes], *, recursive: bool) -> RustNotify:
    # watchfiles' own watch() hides when the watch is in place; the daemon must know.
    return RustNotify([os.fsdecode(p) for p in paths], False, False, 300, recursive, True)


class Watch:
    """The root itself (not recursive) and every top-level directory but `.git` (recursive);
    the recursive watch is set up again when the top-level directories change."""

    def __init__(self, root: bytes, on_change: OnChange) -> None:
        self.root = root
        self.on_change = on_change
        self._stop = threading.Event()
        self._deep_stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._dirs: list[bytes] = []

    def start(self) -> None:
        """Returns once every watch is in place: changes from then on are all reported."""
        top = _notify([self.root], recursive=False)
        self._spawn(lambda: self._watch(top, self._stop, top=True))
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
        if not dirs:
            return
        try:
            deep = _notify(dirs, recursive=True)
        except OSError:
            return  # a directory went meanwhile: the root's watch sees that and restarts us
        stop = self._deep_stop
        self._spawn(lambda: self._watch(deep, stop))

    def _watch(self, notify: RustNotify, stop: threading.Event, *, top: bool = False) -> None:
        with notify:
            while not stop.is_set():
                try:
                    changes = notify.watch(30, 50, 1000, stop)
                except (OSError, RuntimeError):
                    return  # a watched directory vanished: the root's watch restarts us
                if isinstance(changes, str):
                    continue
                rels = {self._rel(path) for _, path in changes}
                if top and not self._stop.is_set() and sorted(self._top_dirs()) != self._dirs:
                    self._restart_deep()
                self.on_change({r for r in rels if r is not None})

    def _rel(self, path: str) -> bytes | None:
        raw = os.fsencode(path)
        if not raw.startswith(self.root + b"/"):
            return None
        rel = raw[len(self.root) + 1 :]
        if rel == b".git" or rel.startswith(b".git/"):
            return None
        return rel


def main() -> None:
    root = os.fsencode(sys.argv[1])
    out = sys.stdout.buffer
    lock = threading.Lock()

    def report(rels: set[bytes]) -> None:
        if not rels:
            return
        with lock:
            out.write(b"".join(rel + b"\0" for rel in rels) + b"\0")
            out.flush()

    watch = Watch(root, report)
    watch.start()
    with lock:
        out.write(b"\0")  # an empty batch: every watch is in place
        out.flush()
    sys.stdin.buffer.read()
    watch.stop()


if __name__ == "__main__":
    main()
