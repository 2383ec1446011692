"""The daemon's side of the lower watch (the watch of the real worktree): connects to the
worktree's watch process (`lower_watch_process`, shared by every session of the worktree),
starting it when no one serves it, and hands its batches of changed paths (relative to the
worktree) to a callback, from a thread of its own; another callback hears when the watch is in
place (`wait_in_place` waits for that), a third when the watch ended without being asked to
(killed, out of memory), before it is connected to again. `sync` returns once every change
made before it was handed to the first callback (git's fsmonitor answers must hold every change
made before the query); `quiet` says so without asking, when nothing changed since the last
batch or sync (see `lower_watch_process`, `Reads`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable

from gitsess.overlay import control
from gitsess.overlay.lower_watch_process import FAILED, SYNCED, TAG, Reads, address

OnChange = Callable[[set[bytes]], None]
OnReady = Callable[[], None]
OnLost = Callable[[], None]

# How long a watch process just started may take to take its name.
START_S = 10.0


class LowerWatcher:
    def __init__(
        self, root: bytes, on_change: OnChange, on_ready: OnReady, on_lost: OnLost
    ) -> None:
        self.root = root
        self.on_change = on_change
        self.on_ready = on_ready
        self.on_lost = on_lost
        self._sock: socket.socket | None = None
        self._started: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        # A reconnection from the reader against stop(); syncs wait on it for their answers,
        # `wait_in_place` for the watch.
        self._lock = threading.Condition()
        self._stopping = False
        # The reader ended: no watch will be in place any more.
        self._ended = False
        # Of the current connection: whether the watch is in place, how many syncs were asked
        # on it and how many were answered (in order).
        self._in_place = False
        self._asked = 0
        self._answered = 0
        # Counts the connections: a change between two of them may have gone unreported.
        self._connection = 0
        # Of the current connection, when the watch process shares them: its inotify
        # descriptor and count of reads, and the count at the last tag handed on (None: none
        # yet).
        self._shared: tuple[int, Reads] | None = None
        self._handled: int | None = None

    def start(self) -> None:
        """Connects, starting the watch process when needed, in a thread of its own: the
        process takes a moment to start, and the view is served meanwhile."""
        self._reader = threading.Thread(target=self._run, daemon=True, name="gitsess-watch")
        self._reader.start()

    def _run(self) -> None:
        try:
            self._connect_and_read()
        finally:
            with self._lock:
                self._ended = True
                self._lock.notify_all()

    def _connect_and_read(self) -> None:
        while True:
            sock = self._open()
            with self._lock:
                if sock is None or self._stopping:
                    if sock is not None:
                        sock.close()
                    return
                self._sock = sock
                self._connection += 1
                self._in_place = False
                self._asked = self._answered = 0
            if not self._read(sock):
                return
            if self._started is not None:
                self._started.poll()  # reaped, if it was the one that ended
                self._started = None  # its exit says nothing of the next one's
            self.on_lost()

    def _open(self) -> socket.socket | None:
        """A connection to the worktree's watch process, started first if no one serves it
        (again if the one started was killed before it took its name); None when none could
        be had (the view then keeps its short cache timeouts)."""
        name = address(self.root)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            sock = control.connect_trusted(name)
            if sock is not None:
                return sock
            started = self._started
            if started is None or started.poll() is not None:
                if started is not None and started.returncode > 0:
                    self._started = None
                    return None  # it could not set the watch up, and said why in the log
                self._started = subprocess.Popen(
                    [sys.executable, "-P", "-m", "gitsess.overlay.lower_watch_process", self.root],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,
                )
            time.sleep(0.005)
        return None

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
            sock, reader = self._sock, self._reader
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if reader is not None:
            reader.join(timeout=5)

    def wait_in_place(self, timeout: float) -> bool:
        """Wait until the watch is in place (True), given up on or stopped, or `timeout`
        seconds passed (False)."""
        with self._lock:
            self._lock.wait_for(
                lambda: self._in_place or self._stopping or self._ended or self._reader is None,
                timeout,
            )
            return self._in_place and self._sock is not None and not self._stopping

    def connection(self) -> int | None:
        """Which connection the watch is in place on (None: none is): every change made while
        one connection is in place is reported on it, so two equal answers mean none was
        missed between them."""
        with self._lock:
            return self._connection if self._in_place and self._sock is not None else None

    def quiet(self) -> bool:
        """Whether every change the watch saw before this call was handed to the callback
        already, known without asking the watch process: its inotify queue is empty (a change
        made before was read, and the read counted first), and every read it counted was
        reported before a tag this connection handed on."""
        with self._lock:
            shared, handled = self._shared, self._handled
            if shared is None or handled is None or not self._in_place or self._stopping:
                return False
            inotify, reads = shared
            try:
                queued = fcntl.ioctl(inotify, termios.FIONREAD, b"\0\0\0\0")
            except OSError:
                return False
            return int.from_bytes(queued, sys.byteorder) == 0 and reads.count() == handled

    def sync(self, timeout: float) -> bool:
        """Wait until the watch has reported every change made before this call; False when
        there is no watch in place, or it did not answer within `timeout` seconds."""
        with self._lock:
            sock = self._sock
            if sock is None or not self._in_place or self._stopping:
                return False
            try:
                sock.sendall(b"s")
            except OSError:
                return False
            self._asked += 1
            mine = self._asked
            self._lock.wait_for(
                lambda: self._sock is not sock or not self._in_place or self._answered >= mine,
                timeout,
            )
            return self._sock is sock and self._answered >= mine

    def _read(self, sock: socket.socket) -> bool:
        """Hands on what the watch reports until the connection ends; whether to connect
        again: not when asked to stop, nor after a watch that could not be set up (the view
        then stays at its short cache timeouts); after one that ended otherwise (killed)."""
        pending = b""
        batch: set[bytes] = set()
        failed = False
        while True:
            try:
                # (the first byte brings the shared descriptors, from a watch that shares them)
                chunk, fds, _, _ = socket.recv_fds(sock, 65536, 2)
            except OSError:
                chunk, fds = b"", []
            if fds:
                self._share(fds)
            if not chunk:
                break
            *names, pending = (pending + chunk).split(b"\0")
            for name in names:
                if name.startswith(TAG):
                    with self._lock:
                        self._handled = int(name[len(TAG) :])
                elif name == SYNCED:
                    with self._lock:
                        self._answered += 1
                        self._lock.notify_all()
                elif name == FAILED:
                    failed = True
                elif name:
                    batch.add(name)
                elif batch:
                    self.on_change(batch)
                    batch = set()
                else:
                    self.on_ready()
                    with self._lock:
                        self._in_place = True
                        self._lock.notify_all()
        with self._lock:
            self._in_place = False
            self._sock = None
            self._lock.notify_all()
            self._unshare()
        sock.close()
        return not (self._stopping or failed)

    def _share(self, fds: list[int]) -> None:
        """The watch process's inotify descriptor and count of reads, for `quiet`."""
        for fd in fds:
            os.set_inheritable(fd, False)  # (received inheritable; no program run gets them)
        with self._lock:
            self._unshare()
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                return
            try:
                self._shared = (fds[0], Reads(fds[1]))
            except (OSError, ValueError):
                for fd in fds:
                    os.close(fd)

    def _unshare(self) -> None:
        """(with the lock held) Forget the connection's shared descriptors."""
        if self._shared is not None:
            inotify, reads = self._shared
            os.close(inotify)
            reads.close()
        self._shared = None
        self._handled = None
