"""The user's spare: one process that has imported the daemon and forks every session's daemon
from itself (`python -m gitsess.runtime.spare`).

A daemon started as a process of its own spent some 17 MiB on importing its modules (trio
alone 11 MiB of the interpreter's own memory), the same in every daemon, none of it shared: 50
sessions took 1.4 GB. A fork of a process that imported them shares those pages with it until
one of them writes a page, and `gc.freeze` keeps the collector from writing them all: a forked
daemon, idle, costs about 3 MiB of its own (docs/PERFORMANCE.md, "Daemons forked from a
spare").

One spare per user, per mount namespace (a daemon mounts in the spare's) and per gitsess
install (its path and its modules' stamps: a daemon runs the code the command that asked for it
runs); found by an abstract socket named after all that. The command that mounts asks it
through that socket, handing it the write end of its readiness pipe (SCM_RIGHTS); the spare
forks, and the child becomes the daemon: a session of its own, output to the session's log, the
command's working directory. A spare with no daemon left and nothing asked of it for `IDLE_S`
exits; one asked while it is not there is started (`start`), and the command falls back to a
daemon of its own when none answers (`mount._start_daemon`).

The price: a forked daemon's command line is the spare's and names no session (`gitsess ps`
names it; `runtime/strays.py` and the tests find a daemon by its open `delta.db`). Not done: a
guard that owns less. The daemon's guard, forked after the imports, comes to own every page the
daemon writes since; one guard per user forked from the spare would need to learn each daemon's
FUSE connection and to see a stuck daemon without the death signal, which only a child gets.

Nothing at the top but what `cli.main` loads anyway (see `prestart`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket
    import subprocess

IDLE_S = 5.0
# How long a command waits for a spare it just started to take its request.
CONNECT_S = 5.0
MODULE = "gitsess.runtime.spare"
DAEMON_MODULE = "gitsess.overlay.daemon"


def address() -> bytes:
    import hashlib

    import gitsess

    package = os.path.dirname(os.path.abspath(gitsess.__file__))
    key = [str(os.geteuid()), sys.executable, package]
    for ns in ("mnt", "user", "pid"):
        try:
            key.append(os.readlink(f"/proc/self/ns/{ns}"))
        except OSError:
            key.append("")
    key += _stamps(package)
    return b"\0gitsess-spare-" + hashlib.sha256("\0".join(key).encode()).hexdigest()[:32].encode()


def _stamps(package: str) -> list[str]:
    """Every module's size and mtime: a spare of an install changed since runs old code."""
    stamps = []
    todo = [package]
    while todo:
        with os.scandir(todo.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                    todo.append(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    stamps.append(f"{e.path}:{st.st_size}:{st.st_mtime_ns}")
    return sorted(stamps)


def start() -> subprocess.Popen[bytes] | None:
    """Start the spare unless it runs; the process started, if one was (it takes the name
    first thing, and one that finds it taken exits)."""
    import subprocess

    running = _connect(address())
    if running is not None:
        running.close()
        return None
    return subprocess.Popen(
        # -P: the current directory is not put on sys.path (see prestart)
        [sys.executable, "-P", "-m", MODULE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        start_new_session=True,
    )


def fork_daemon(
    argv: list[str], log: str, ready: int, started: subprocess.Popen[bytes] | None
) -> bool:
    """Have the spare fork a daemon running `argv`, telling `ready` (the write end of the
    readiness pipe) when it serves; False when no spare took the request. `started` is the
    spare `start` started, waited for while it takes its name."""
    import json
    import socket
    import time

    name = address()
    deadline = time.monotonic() + CONNECT_S
    sock = _connect(name)
    while sock is None and started is not None and time.monotonic() < deadline:
        if started.poll() is not None:  # it found the name taken, or died
            sock = _connect(name)
            break
        time.sleep(0.005)
        sock = _connect(name)
    if sock is None:
        return False
    with sock:
        request = {"argv": argv, "log": log, "cwd": os.getcwd()}
        try:
            socket.send_fds(sock, [json.dumps(request).encode()], [ready])
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(16) == b"ok"
        except OSError:
            return False


def _connect(name: bytes) -> socket.socket | None:
    # (imported here: the command line's fast path imports this module before the overlay)
    from gitsess.overlay import control

    return control.connect_trusted(name, CONNECT_S)


def serve() -> int:
    import contextlib
    import gc
    import importlib
    import select
    import socket
    import time

    from gitsess.overlay import control

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address())
    except OSError:
        return 0  # another spare took the name first
    listener.listen(64)
    with contextlib.suppress(Exception):
        # A daemon that cannot be imported fails again in the child, into its log.
        importlib.import_module(DAEMON_MODULE)
    # What the imports made stays out of the collector's reach: its passes would write to
    # every object, and so copy every page a forked daemon shares with the spare.
    gc.freeze()
    children: set[int] = set()
    idle_since = time.monotonic()
    while True:
        for pid in list(children):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            except ChildProcessError:
                children.discard(pid)
        if children:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_S:
            return 0
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        with conn:
            if not control.trusted(control.peer_uid(conn)):
                continue
            child = _take(listener, conn)
            if child is not None:
                children.add(child)
                idle_since = time.monotonic()


def _take(listener: socket.socket, conn: socket.socket) -> int | None:
    """Read one request and fork its daemon; the child's pid, None for a bad request."""
    import contextlib
    import json
    import socket

    conn.settimeout(CONNECT_S)
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 1)
        request = json.loads(data)
        argv, log, cwd = list(request["argv"]), str(request["log"]), str(request["cwd"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return None
    ready = fds[0]
    pid = os.fork()
    if pid == 0:
        _daemon(listener, conn, argv, log, cwd, ready)
    os.close(ready)
    with contextlib.suppress(OSError):
        conn.sendall(b"ok")
    return pid


def _daemon(
    listener: socket.socket, conn: socket.socket, argv: list[str], log: str, cwd: str, ready: int
) -> None:
    """In the forked child: become the session's daemon."""
    code = 1
    try:
        listener.close()
        conn.close()
        os.setsid()
        out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.dup2(out, sys.stdout.fileno())
        os.dup2(out, sys.stderr.fileno())
        os.close(out)
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")
        from gitsess.overlay import daemon

        code = daemon.main([*argv, "--ready-fd", str(ready)])
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    sys.exit(serve())
