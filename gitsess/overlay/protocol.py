"""The daemon's control protocol: one client function per op, each with its typed answer.

On the wire (`control.py`) a request is one JSON line `{"op": OP, ...}` and its answer one
JSON line, `{"ok": true, ...}`, or `{"ok": false, "error": TEXT}` with `"stopping": true` when
the daemon turned it down because it is stopping; such an answer raises `Refused` here. The
daemon serves the same ops from one table (`daemon.HANDLERS`). A client function returns None
(or False) when no daemon serves the session.

The fsmonitor op has its client in `fsmonitor_hook.py`, which git runs on every `git status`
and which therefore imports nothing of this.
"""

from __future__ import annotations

from gitsess.git.view import Stamp
from gitsess.overlay import control

# (`typing` itself costs a command some 10 ms of start; mypy takes any name TYPE_CHECKING as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping, Sequence
    from typing import Any

JOIN = "join"
STATUS = "status"
SYNC = "sync"
COPY = "copy"
DROP = "drop"
FSMONITOR = "fsmonitor"
PERSIST = "persist"
STOP = "stop"
KV = "kv"
CHECKPOINT = "checkpoint"
REWIND = "rewind"
TRIM = "trim"


class Refused(Exception):
    """The daemon answered `ok: false`; `whole`: its error is the user's whole message (the
    one an offline command gives), not a detail of the request."""

    def __init__(self, error: str, *, stopping: bool, whole: bool = False) -> None:
        super().__init__(error)
        self.stopping, self.whole = stopping, whole


class Joiner:
    """Who joins: a `gitsess run` command, under `role`."""

    __slots__ = ("command", "pid", "read_only", "role", "run_id")

    def __init__(
        self, pid: int, role: str | None, read_only: bool, command: list[str], run_id: int | None
    ) -> None:
        self.pid, self.role, self.read_only = pid, role, read_only
        self.command, self.run_id = command, run_id


class DaemonStatus:
    __slots__ = (
        "daemon_pid", "listing", "mountpoint", "participants", "persistent", "read_only", "watched",
    )  # fmt: skip

    def __init__(self, reply: dict[str, Any]) -> None:
        self.daemon_pid: int = reply["daemon_pid"]
        self.mountpoint: str = reply["mountpoint"]
        self.persistent: bool = reply["persistent"]
        self.read_only: bool = reply["read_only"]
        # Whether the lower watch is in place (until then, answers are cached 1 s).
        self.watched: bool = reply["watched"]
        # Whether a listing ahead (listahead.py) is queued or in flight. (`.get`: a daemon
        # of an older install, still serving after an upgrade, does not say.)
        self.listing: bool = reply.get("listing", False)
        self.participants: list[dict[str, Any]] = reply["participants"]


class Dropped:
    __slots__ = ("dropped", "kept")

    def __init__(self, reply: dict[str, Any]) -> None:
        self.dropped: int = reply["dropped"]  # names taken out of the delta
        self.kept: list[str] = reply["kept"]  # paths written to since the apply read them


def _answer(reply: dict[str, Any]) -> dict[str, Any]:
    if not reply.get("ok"):
        raise Refused(
            str(reply.get("error")),
            stopping=bool(reply.get("stopping")),
            whole=bool(reply.get("whole")),
        )
    return reply


def _request(
    session_dir: str, op: str, timeout: float = control.TIMEOUT, **fields: object
) -> dict[str, Any] | None:
    reply = control.request(session_dir, {"op": op, **fields}, timeout)
    return None if reply is None else _answer(reply)


def join(sock: socket.socket, participant: Joiner) -> None:
    """Register a participant on `sock`, which stays its registration while it is open."""
    p = participant
    message = {
        "op": JOIN, "pid": p.pid, "role": p.role, "read_only": p.read_only,
        "command": p.command, "run_id": p.run_id,
    }  # fmt: skip
    _answer(control.send(sock, message))


def status(session_dir: str, timeout: float = control.TIMEOUT) -> DaemonStatus | None:
    reply = _request(session_dir, STATUS, timeout)
    if reply is None:
        return None
    return DaemonStatus(reply)


def sync(session_dir: str) -> bool:
    """Have the daemon commit everything now, durably."""
    return _request(session_dir, SYNC) is not None


def copy(session_dir: str, dest: str, timeout: float) -> bool:
    """Have the daemon copy its delta to `dest` (a new session's `delta.db`), serving no
    request meanwhile."""
    return _request(session_dir, COPY, timeout, dest=dest) is not None


def drop(
    session_dir: str,
    paths: Sequence[str],
    restamp: Sequence[str] = (),
    expect: Mapping[str, Stamp | None] | None = None,
) -> Dropped | None:
    """Take applied paths out of the delta, but those `expect` shows written since."""
    reply = _request(
        session_dir, DROP, paths=list(paths), restamp=list(restamp), expect=dict(expect or {})
    )
    if reply is None:
        return None
    return Dropped(reply)


def persist(session_dir: str) -> bool:
    """Have the daemon stay without participants (until `stop`)."""
    return _request(session_dir, PERSIST) is not None


def stop(session_dir: str) -> bool:
    """Have the daemon commit, unmount and exit."""
    return _request(session_dir, STOP) is not None


def kv(session_dir: str, key: str, text: str | None, updated_ns: int) -> bool | None:
    """Set `key` to the JSON `text` (None: remove it) in the session's key-value store, through
    the daemon (from inside a run, where the state dir is read-only); whether the key was there
    before, None when no daemon serves the session."""
    reply = _request(session_dir, KV, key=key, text=text, updated_ns=updated_ns)
    if reply is None:
        return None
    return bool(reply["existed"])


def checkpoint(
    session_dir: str, kind: str, message: str, run_id: int | None, role: str | None
) -> int | None:
    """Have the daemon commit and make a checkpoint; its id (None: no daemon)."""
    reply = _request(session_dir, CHECKPOINT, kind=kind, message=message, run_id=run_id, role=role)
    return None if reply is None else int(reply["id"])


def rewind(
    session_dir: str,
    target: int,
    kind: str,
    writers: Sequence[tuple[int, int, str]] = (),
    force: bool = False,
) -> int | None:
    """Have the daemon rewind the session to checkpoint `target`; the operation's id. It
    refuses when one of the `writers` (pid, inode, path: files open for writing in the view)
    holds a file it changes, unless `force`."""
    reply = _request(
        session_dir, REWIND, target=target, kind=kind, writers=list(writers), force=force
    )
    return None if reply is None else int(reply["operation"])


# Dropping old checkpoints and events of a big log, then giving pages back, takes seconds.
TRIM_TIMEOUT = 120.0


def trim(
    session_dir: str, keep: int, max_age_ns: int, log_events: int, log_before_ns: int
) -> tuple[int, int, bool] | None:
    """Have the daemon apply a retention (see `History.prune`, `retention.trim_log`): the
    checkpoints and events it dropped, and whether delta.db shrank (None: no daemon)."""
    reply = _request(
        session_dir,
        TRIM,
        TRIM_TIMEOUT,
        keep=keep,
        max_age_ns=max_age_ns,
        log_events=log_events,
        log_before_ns=log_before_ns,
    )
    if reply is None:
        return None
    return int(reply["checkpoints"]), int(reply["events"]), bool(reply["shrank"])
