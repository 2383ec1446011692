"""Starting the disk write of a big file's data while it is still being written.

A file written through a view reaches its data file as WRITE requests, and the data file's
pages then sit dirty in the page cache until an `fsync` (or the kernel's writeback, 30 s
later) writes them all at once. Every `EVERY` bytes written to one file, the disk write of its
dirty pages is started (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait for it),
so it runs while the writer is still writing, and an `fsync` at the end finds little left.

The call can block while the disk's queue is full, so it runs in a thread of its own and never
on the event loop: a writer through the view is not slowed to the disk's pace, nor are the
other clients of the mount. A file already waiting for its start is not queued twice; one
written to again while its start runs is started once more when that one is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import threading

from gitsess.libc import LIBC

# A file's data is sent to the disk every this many bytes written to it.
EVERY = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2

_sync_file_range = getattr(LIBC, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]


class WriteBehind:
    """Counts what each file had written and starts its disk write every `EVERY` bytes."""

    def __init__(self) -> None:
        self._written: dict[int, int] = {}  # key -> bytes written since its last start
        self._queued: set[int] = set()
        self._again: set[int] = set()  # queued ones written to again since their start began
        self._lock = threading.Lock()
        self._starts: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def wrote(self, key: int, fd: int, nbytes: int) -> None:
        """`nbytes` were written to `fd`, the data file of `key`."""
        if _sync_file_range is None:
            return
        written = self._written.get(key, 0) + nbytes
        if written < EVERY:
            self._written[key] = written
            return
        self._written[key] = 0
        with self._lock:
            if key in self._queued:
                # The start under way may have begun before these bytes: it goes once more.
                self._again.add(key)
                return
        try:
            # A duplicate, so that the data file may be closed (and its number reused) meanwhile.
            dup = os.dup(fd)
        except OSError:
            return  # out of descriptors: the write stands, only its early start is skipped
        with self._lock:
            self._queued.add(key)
        self._starts.put((key, dup))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True)
            self._thread.start()

    def forget(self, key: int) -> None:
        """The file was synced or deleted: its count starts again."""
        self._written.pop(key, None)

    def close(self) -> None:
        """Wait for the starts queued so far, then stop the thread."""
        if self._thread is not None:
            self._starts.put(None)
            self._thread.join()
            self._thread = None
        self._written.clear()

    def _run(self) -> None:
        assert _sync_file_range is not None
        while (item := self._starts.get()) is not None:
            key, fd = item
            while True:
                # Only a hint: a failure (the disk full, an I/O error) is for the fsync to report.
                _sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)
                with self._lock:
                    if key not in self._again:
                        self._queued.discard(key)
                        break
                    self._again.discard(key)
            with contextlib.suppress(OSError):
                os.close(fd)
