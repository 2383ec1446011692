"""The per-session daemon: mounts the view, serves it, and answers on the control channel.

Started by `gitsess.runtime.mount` (forked from the spare, or as `python -m
gitsess.overlay.daemon`); its output goes to the log file in the session directory, and a pipe
carries its readiness (`ready`, `busy`, or the mount error). It takes `daemon.lock` for its whole
life, then binds the control socket. It stays while participants hold their connection (0.3 s
after the last one leaves, or, when persistent, until told to stop), then commits, unmounts and
exits.

Participants join with their pid, role and command and keep the connection open; the command
inherits the socket, so the kernel tells the daemon when the last holder is gone, even by kill
-9. Every op has a client function in `protocol` and a handler in `HANDLERS` (`fsmonitor` apart:
it first waits for the lower watch); a failed or malformed request gets an error answer and
never ends the daemon. A participant's `join` is answered once the lower watch has reported
(and the kernel forgotten) every change of the worktree made before it: a run started right
after an edit outside sees the edit, not what the kernel held of the path before. Live
checkpoints, rewinds, drops and fork copies run on the event loop between two requests, so no
process in the view sees a mix.

Stopping: once it decides to stop it answers `join`, `status` and `persist` with `stopping` and
keeps its lock until its last commit and unmount are done, so an offline writer or a new daemon
never overlaps them. It stops only after a commit of everything pending succeeded (`_stop`): on
a full disk it stays mounted and serving, refuses `stop` with one line, and the commit loop
stops it after its first commit that works. Listings in flight are served (up to 2 s) before it
leaves its loop, since each holds its directory's lock in the kernel. A request it has read
(but a join) is answered even as it leaves its loop: clients take a connection closed with no
answer for a request it never read, and make it again once it is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import pyfuse3
import trio

from gitsess.errors import GitsessError

# (`gitunit` reads HEAD with it when the first git inside takes the index's lock: imported
# here, by the spare, it is not loaded during the first `git status`, 1.3-1.7 ms)
from gitsess.git import head as _head  # noqa: F401
from gitsess.git.view import Stamp
from gitsess.overlay import (
    control,
    daemon_fsmonitor,
    gitdir,
    guard,
    history,
    layout,
    presence,
    protocol,
    retention,
)
from gitsess.overlay.audit import Attribution
from gitsess.overlay.checkpointer import Checkpointer
from gitsess.overlay.delta import DeltaStore, copy_delta
from gitsess.overlay.fs import Filesystem
from gitsess.overlay.hostloop import HostLoop
from gitsess.overlay.index_view import IndexView
from gitsess.overlay.kvtable import kv_get, kv_put, kv_remove
from gitsess.overlay.listahead import ListAhead
from gitsess.overlay.lower_watcher import LowerWatcher
from gitsess.overlay.presence import Presence
from gitsess.overlay.tree import Tree
from gitsess.store import db

log = logging.getLogger("gitsess.daemon")

COMMIT_INTERVAL = 0.1
# How often the daemon looks whether delta.db has free pages to give back (`DeltaStore.shrink`).
SHRINK_INTERVAL = 5.0
# How long a fresh daemon waits for its first participant before giving up.
FIRST_JOIN_TIMEOUT = 15.0
# How long the daemon lingers after the last participant leaves (a quick re-run rejoins).
LINGER = 0.3
# How long a join waits for the lower watch to report what changed before it; past that (a
# watch process stopped or starved), the participant starts anyway.
JOIN_SYNC_TIMEOUT = 5.0
# The kernel reads ahead 128 KiB on a FUSE mount, and INIT can only lower that: a sequential read
# of a big file then costs one READ per 128 KiB. Two READs of the largest size (about 1 MiB)
# keep two in flight: a cold read of 500 MiB took half the daemon's CPU (docs/PERFORMANCE.md).
# Exactly two: the kernel cuts each window of read-ahead into READs of that size, and the rest
# of a window that is no multiple of it became a READ of its own (a third of them, of 32 KiB).
READ_AHEAD_KB = 2 * pyfuse3.read_size() // 1024
# How long a stopping daemon serves its own directory listings in flight, at most.
LISTINGS_DRAIN = 2.0
# While commits fail, how often the log says so again.
FAILURE_LOG_INTERVAL = 60.0
# How long the last commit, once the view is no longer served, waits between attempts.
FINAL_RETRY = 1.0


# How often the log tells of connections refused for one cause (another user's): a loop of
# connects must not fill the owner's disk with the log.
REFUSAL_LOG_INTERVAL = 60.0


@dataclass
class Refusals:
    """Refused control connections per cause: logged once per interval, with a count."""

    logged: dict[str, float] = field(default_factory=dict)
    unlogged: dict[str, int] = field(default_factory=dict)

    def note(self, cause: str, now: float) -> str | None:
        """The line to log for one more refusal for `cause`, or None to stay silent."""
        count = self.unlogged.get(cause, 0) + 1
        last = self.logged.get(cause)
        if last is not None and now - last < REFUSAL_LOG_INTERVAL:
            self.unlogged[cause] = count
            return None
        self.logged[cause] = now
        self.unlogged[cause] = 0
        return f"refused {count} control connection(s) from {cause}"


@dataclass
class DaemonState:
    tree: Tree
    mountpoint: str
    persistent: bool
    read_only: bool
    ahead: ListAhead
    presence: Presence
    checkpoints: Checkpointer
    participants: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1
    ever_joined: bool = False
    # Set once the daemon decided to stop: it still holds the session's name (its lock) until
    # its last commit and unmount, but takes no one in.
    stopping: bool = False
    stale_entries: list[tuple[int, bytes]] = field(default_factory=list)
    stale_inodes: list[int] = field(default_factory=list)
    stop_asked: trio.Event = field(default_factory=trio.Event)
    # Why the daemon is to stop as soon as it can save everything (a signal, the last
    # participant gone) while the delta cannot be written: a full disk.
    stop_wanted: str | None = None
    # Since when commits fail (monotonic), and when that was last logged.
    failing_since: float | None = None
    failure_logged: float = 0.0
    refusals: Refusals = field(default_factory=lambda: Refusals())
    # The view left the mount table under the daemon (a lazy unmount): the mount point is not
    # ours to unmount any more.
    detached: bool = False
    # delta.db was deleted under the daemon: nothing it holds can be saved anywhere.
    abandoned: bool = False
    watcher: LowerWatcher | None = None


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gitsess-daemon")
    p.add_argument("--session-id", required=True)
    p.add_argument("--lower", required=True)
    p.add_argument("--delta", required=True)
    p.add_argument("--mountpoint", required=True)
    p.add_argument("--hide", action="append", default=[])
    p.add_argument("--registry")
    p.add_argument("--ready-fd", type=int)
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--read-only", action="store_true")
    p.add_argument("--allow-other", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # Before any thread starts (it forks): see overlay/guard.py.
    guarded = guard.start()
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    session_dir = os.path.dirname(args.delta)
    if control.hold(session_dir) is None:
        _ready(args.ready_fd, "busy")  # another daemon serves this session
        return 3
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = control.new_address(args.session_id)
    try:
        listener.bind(name)
    except OSError as e:
        _ready(args.ready_fd, f"cannot bind the control socket {name[1:].decode()}: {e}")
        return 1
    listener.listen(64)
    control.publish(session_dir, name)
    store = DeltaStore(args.delta)
    registry = _hold(args.registry)
    # Made before the mount: past `pyfuse3.init` only the `try` below unmounts, and a daemon
    # that dies with its view mounted leaves it behind.
    checkpoints = Checkpointer(store.conn, args.delta)
    tree = Tree(store, args.lower, {os.fsencode(h) for h in args.hide})
    tree.readonly = args.read_only
    pointer = tree.lower.redirects.get(gitdir.GIT)
    if pointer is not None:
        gitdir.name_git_dir_at(pointer, tree.lower.git, args.mountpoint)
    options = {"fsname=gitsess", "subtype=gitsess", "default_permissions"}
    if args.allow_other:
        options.add("allow_other")
    if args.read_only:
        options.add("ro")
    ahead = ListAhead(args.mountpoint)
    tree.index_view = IndexView(
        tree.lower_path(tree.lower.git.index_file), tree.root, os.fsencode(args.mountpoint)
    )
    tree.index_view.note_mounted(tree)
    try:
        pyfuse3.init(Filesystem(tree, ahead), args.mountpoint, options)
    except RuntimeError as e:
        _ready(args.ready_fd, f"mount failed: {e}")
        return 1
    try:
        if not guard.arm(guarded, args.mountpoint):
            log.warning("no guard: %s is not in the mount table", args.mountpoint)
        state = DaemonState(
            tree,
            args.mountpoint,
            args.persistent,
            args.read_only,
            ahead,
            Presence(args.mountpoint, args.delta),
            checkpoints,
        )
    except BaseException:
        # (nothing served yet: the view goes with the daemon, never left behind)
        pyfuse3.close(unmount=True)
        raise
    watcher = LowerWatcher(tree.root, lambda rels: None, lambda: None, lambda: None)
    try:
        HostLoop().run(lambda ended: _serve(state, listener, watcher, args.ready_fd, ended))
    finally:
        guard.stand_down(guarded)
        watcher.stop()
        if state.abandoned:
            with contextlib.suppress(OSError, apsw.Error):
                tree.save()
        else:
            _commit_until_saved(tree)
        pyfuse3.close(unmount=not state.detached)
        tree.close()
        state.checkpoints.close()
        store.close()
        if registry is not None:
            registry.close()
        log.info("unmounted %s", args.mountpoint)
    return 0


def _hold(registry: str | None) -> apsw.Connection | None:
    """The registry, held open while the view is mounted.

    Processes inside a run read it through its `-shm`, which they cannot write: the first
    connection to open it rebuilds the `-shm` and the last one to close deletes it, and a
    reader in between fails ("attempt to write a readonly database"). With this one held,
    neither happens while the run's view is mounted."""
    if registry is None or not os.path.exists(registry):
        return None
    try:
        conn = db.connect(Path(registry))
    except GitsessError as e:
        log.warning("not holding the registry open: %s", e)  # the view works without
        return None
    with contextlib.suppress(apsw.Error):
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    return conn


def _commit_until_saved(tree: Tree) -> None:
    """The last commit, after the loop that served the view ended: acknowledged writes are
    only in memory until it succeeds, so on a full disk it waits for space (SIGKILL ends it)."""
    last_logged = 0.0
    while True:
        try:
            tree.save()
            return
        except OSError as e:
            if time.monotonic() - last_logged >= FAILURE_LOG_INTERVAL:
                last_logged = time.monotonic()
                log.error("cannot save the session's last changes (%s); retrying", e)
            time.sleep(FINAL_RETRY)


def _ready(fd: int | None, message: str) -> None:
    if fd is None:
        return
    os.write(fd, message.encode() + b"\n")
    os.close(fd)


async def _serve(
    state: DaemonState,
    listener: socket.socket,
    watcher: LowerWatcher,
    ready_fd: int | None,
    fuse_ended: trio.Event,
) -> None:
    """Everything but the FUSE requests, which `HostLoop` serves while this waits for
    `fuse_ended`."""
    token = trio.lowlevel.current_trio_token()
    state.watcher = watcher
    watcher.on_change = lambda rels: _invalidate(state.tree, rels, token)
    watcher.on_ready = lambda: _invalidate_known(state.tree, token)
    watcher.on_lost = lambda: _watch_lost(state.tree, token)
    # The watch sets itself up in a process of its own (its walk holds that process's GIL,
    # 0.1 s on 50,000 files) while the view is already served; once it is in place, whatever
    # the kernel learnt meanwhile is asked again, so no change of that window stays unseen.
    watcher.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_commit_loop, state)
        nursery.start_soon(state.checkpoints.run)
        nursery.start_soon(_stop_when_asked, state)
        nursery.start_soon(_signals, state)
        nursery.start_soon(_watch_presence, state)
        nursery.start_soon(_control_loop, state, trio.socket.from_stdlib_socket(listener))
        if not state.persistent:
            nursery.start_soon(_first_join_deadline, state)
        _ready(ready_fd, "ready")
        nursery.start_soon(daemon_fsmonitor.sweep_ahead, state)
        log.info("serving %s (pid %d)", state.mountpoint, os.getpid())
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(
                _raise_read_ahead, state.mountpoint, abandon_on_cancel=True
            )
        )
        # What a crash left to unlink (gigabytes, at worst) goes while the view is served.
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(state.tree.remove_stray_data, abandon_on_cancel=True)
        )
        await fuse_ended.wait()
        nursery.cancel_scope.cancel()


def _raise_read_ahead(mountpoint: str) -> None:
    """Runs in a thread, as its `stat` of the view waits until the event loop has answered the
    kernel's INIT, whose reply sets the read-ahead this then raises. Only root may; others keep
    the kernel's 128 KiB."""
    try:
        st = os.stat(mountpoint)
        bdi = f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
        with open(f"{bdi}/read_ahead_kb", "w") as f:
            f.write(f"{READ_AHEAD_KB}\n")
    except OSError as e:
        log.info("read-ahead left at the kernel's default: %s", e)


def _invalidate(tree: Tree, rels: set[bytes], token: trio.lowlevel.TrioToken) -> None:
    """Runs in the watcher thread: kernel invalidations must not block the event loop."""
    _forget_in_kernel(token, tree.stale_caches, rels)


def _invalidate_known(tree: Tree, token: trio.lowlevel.TrioToken) -> None:
    """Runs in the watcher thread once the watch is in place: the names and inodes the kernel
    may hold, so it looks each up again (see `Tree.catch_up`)."""
    _forget_in_kernel(token, tree.catch_up)


def _watch_lost(tree: Tree, token: trio.lowlevel.TrioToken) -> None:
    """Runs in the watcher thread when the watch ended unasked, before it is started again:
    the kernel forgets what it holds, and until a new watch is in place (and catches up),
    answers are cached for a second."""
    log.warning("the lower watch ended; starting it again")
    _forget_in_kernel(token, tree.lose_watch)


def _forget_in_kernel(
    token: trio.lowlevel.TrioToken,
    stale: Callable[..., tuple[list[tuple[int, bytes]], list[int]]],
    *args: object,
) -> None:
    """Asks `stale` on the event loop which (directory, name) entries and inodes are stale,
    then tells the kernel from this thread (it may need the event loop meanwhile)."""
    try:
        entries, inodes = trio.from_thread.run_sync(stale, *args, trio_token=token)
    except trio.RunFinishedError:
        return
    done = _invalidate_entries(entries)
    for ino in set(inodes) - done:
        with contextlib.suppress(OSError):
            pyfuse3.invalidate_inode(pyfuse3.InodeT(ino))


def _invalidate_all(entries: list[tuple[int, bytes]], inodes: list[int]) -> None:
    done = _invalidate_entries(entries)
    for ino in set(inodes) - done:
        with contextlib.suppress(OSError):
            pyfuse3.invalidate_inode(pyfuse3.InodeT(ino))


def _invalidate_entries(entries: list[tuple[int, bytes]]) -> set[int]:
    """Returns the directories, whose inodes it invalidated too: the kernel may hold their
    listings (see fs.py's zero-message opens)."""
    for parent, name in entries:
        with contextlib.suppress(OSError):
            pyfuse3.invalidate_entry(pyfuse3.InodeT(parent), pyfuse3.FileNameT(name))
    parents = {parent for parent, _ in entries}
    for parent in parents:
        with contextlib.suppress(OSError):
            pyfuse3.invalidate_inode(pyfuse3.InodeT(parent))
    return parents


async def _commit_loop(state: DaemonState) -> None:
    tree = state.tree
    last_shrink = time.monotonic()
    while True:
        await trio.sleep(COMMIT_INTERVAL)
        if tree.has_pending:
            try:
                tree.commit()
            except OSError as e:
                _saving_failed(state, e)
                # The WAL holds pages already in delta.db: giving them back may be the room
                # the next commit needs (a removal's commit is what frees its data file).
                with contextlib.suppress(apsw.Error):
                    tree.store.checkpoint()
                continue
            _saved(state)
        # (also after the commits of fsync(2) and of the ops, which save on their own)
        state.checkpoints.committed()
        if state.stop_wanted is not None and not state.stopping:
            _stop(state, state.stop_wanted)
        if time.monotonic() - last_shrink >= SHRINK_INTERVAL:
            last_shrink = time.monotonic()
            try:
                if tree.store.shrink():
                    log.info("gave delta.db's free pages back to the disk")
            except apsw.Error as e:  # a reader's snapshot, a full disk: next time
                log.warning("could not shrink delta.db (%s)", e)


def _saving_failed(state: DaemonState, e: OSError) -> None:
    now = time.monotonic()
    if state.failing_since is None:
        state.failing_since = now
    if now - state.failure_logged >= FAILURE_LOG_INTERVAL:
        state.failure_logged = now
        log.warning("cannot save to the delta (%s); the changes stay in memory, retrying", e)


def _saved(state: DaemonState) -> None:
    if state.failing_since is not None:
        log.info("saved again after %.0f s", time.monotonic() - state.failing_since)
        state.failing_since = None
        state.failure_logged = 0.0


def _stop(state: DaemonState, why: str, *, until_saved: bool = True) -> OSError | None:
    """Stop once everything acknowledged is in the delta. When it cannot be saved (a full
    disk), the view stays mounted and served, and the error is returned; `until_saved`
    leaves the stop to the commit loop, which makes it after its first commit that works."""
    if state.stopping:
        return None
    try:
        state.tree.save()
    except OSError as e:
        _saving_failed(state, e)
        if until_saved:
            state.stop_wanted = why
        return e
    _saved(state)
    log.info("%s: stopping", why)
    state.stopping = True
    state.stop_asked.set()
    return None


async def _stop_when_asked(state: DaemonState) -> None:
    await state.stop_asked.wait()
    # Our own listings wait for this loop: it serves them before it ends (see listahead).
    state.ahead.stop()
    with trio.move_on_after(LISTINGS_DRAIN):
        while not state.ahead.idle:
            await trio.sleep(0.001)
    pyfuse3.terminate()


async def _watch_presence(state: DaemonState) -> None:
    """Stop once the view is gone: unmounted (what the session holds is saved first), or its
    delta.db deleted (there is nowhere left to save it)."""
    while not state.stopping:
        await trio.sleep(presence.INTERVAL)
        if state.presence.deleted():
            log.warning("%s was deleted: stopping without saving", state.presence.delta)
            state.abandoned = True
            state.stopping = True
            state.stop_asked.set()
        elif state.presence.unmounted():
            state.detached = True
            _stop(state, "the view was unmounted")


async def _signals(state: DaemonState) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        # Kept open: a stop that waits for disk space must not leave a second SIGTERM to the
        # default action, which would end the daemon with the changes in memory.
        async for signum in signals:
            _stop(state, f"signal {signum}")


async def _first_join_deadline(state: DaemonState) -> None:
    await trio.sleep(FIRST_JOIN_TIMEOUT)
    if not state.ever_joined and not state.persistent:
        _stop(state, "nobody joined")


async def _control_loop(state: DaemonState, listener: trio.socket.SocketType) -> None:
    async with trio.open_nursery() as nursery:
        while True:
            conn, _ = await listener.accept()
            uid = control.peer_uid(conn)  # type: ignore[arg-type]
            if not control.trusted(uid):
                # Another local user: no status, no drop, no stop, no copy (see control.py).
                line = state.refusals.note(f"uid {uid}", time.monotonic())
                if line is not None:
                    log.warning("%s", line)
                conn.close()
                continue
            nursery.start_soon(_client, state, trio.SocketStream(conn))


async def _client(state: DaemonState, stream: trio.SocketStream) -> None:
    participant: int | None = None
    buf = b""
    try:
        async with stream:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        msg = json.loads(line)
                        if isinstance(msg, dict) and msg.get("op") == protocol.FSMONITOR:
                            reply, joined = await daemon_fsmonitor.answer(state, msg)
                        else:
                            reply, joined = _handle(state, msg)
                    except OSError as e:
                        reply, joined = {"ok": False, "error": str(e)}, None
                    except Exception as e:
                        # A malformed request must not take the daemon, and the view, down.
                        log.exception("control request %r failed", line[:200])
                        reply, joined = {"ok": False, "error": f"bad request: {e!r}"}, None
                    if joined is not None:
                        participant = joined
                        await _worktree_reported(state)
                    # Answered even when the daemon stops meanwhile (its loop is cancelled): a
                    # client takes a connection closed unanswered for a request never read and
                    # makes it again, offline once the daemon is gone. A rewind was so done a
                    # second time, which kept the state it rewound to as the one to undo to.
                    # Not a join: unanswered, it joins the next daemon, not a view going away.
                    with trio.CancelScope(
                        shield=joined is None, deadline=trio.current_time() + control.TIMEOUT
                    ) as answering:
                        await _answer(state, stream, reply)
                    if answering.cancelled_caught:
                        return  # (past the client's own timeout, which gave up: the stream is cut)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
        return
    finally:
        if participant is not None:
            left = state.participants.pop(participant, None)
            if left is not None:
                state.tree.audit.participants.pop(int(left.get("pid") or 0), None)
                state.tree.audit.forget_participants()
            if not state.participants and not state.persistent:
                await _linger_then_stop(state)


async def _answer(state: DaemonState, stream: trio.SocketStream, reply: dict[str, Any]) -> None:
    if state.stale_entries or state.stale_inodes:
        # Answer only once the kernel forgot them, so the caller's next read sees the
        # worktree; from a thread, as the kernel may need the loop.
        stale, state.stale_entries = state.stale_entries, []
        inodes, state.stale_inodes = state.stale_inodes, []
        # (abandoned at the answer's deadline: a stopping view may no longer serve what the
        # kernel waits for)
        await trio.to_thread.run_sync(_invalidate_all, stale, inodes, abandon_on_cancel=True)
        # A rewind's old content and attributes, shown until the kernel dropped them; dropped
        # again once released: a page read from a hold meanwhile is gone (replaced.py).
        released = state.tree.replaced.release_all()
        if released:
            await trio.to_thread.run_sync(_invalidate_all, [], released, abandon_on_cancel=True)
    await stream.send_all(json.dumps(reply).encode() + b"\n")


async def _worktree_reported(state: DaemonState) -> None:
    """Until the lower watch has handed on every change of the worktree made before now (and
    the kernel forgot what those changes made stale: the watcher thread invalidates a batch
    before it reads the next), or JOIN_SYNC_TIMEOUT. Most joins find the watch quiet."""
    if state.watcher is None or not state.tree.watched:
        return
    if not await daemon_fsmonitor.lower_synced(state, timeout=JOIN_SYNC_TIMEOUT):
        log.info("a participant joined before the lower watch reported the worktree")


async def _linger_then_stop(state: DaemonState) -> None:
    await trio.sleep(LINGER)
    if not state.participants and not state.persistent and not state.stopping:
        _stop(state, "last participant left")


Reply = tuple[dict[str, Any], int | None]  # the answer, and the participant a join added


def _handle(state: DaemonState, msg: dict[str, Any]) -> Reply:
    op = msg.get("op")
    if state.stopping and op in (protocol.JOIN, protocol.STATUS, protocol.PERSIST):
        return {"ok": False, "stopping": True, "error": "the session daemon is stopping"}, None
    handler = HANDLERS.get(op) if isinstance(op, str) else None
    if handler is None:
        return {"ok": False, "error": f"unknown op {op!r}"}, None
    return handler(state, msg)


def _join(state: DaemonState, msg: dict[str, Any]) -> Reply:
    pid = state.next_id
    state.next_id += 1
    state.tree.audit.participants[int(msg.get("pid") or 0)] = Attribution(
        msg.get("role"), msg.get("run_id")
    )
    state.tree.audit.forget_participants()
    state.participants[pid] = {
        "pid": msg.get("pid"),
        "role": msg.get("role"),
        "read_only": bool(msg.get("read_only")),
        "command": msg.get("command"),
        "run_id": msg.get("run_id"),
        "joined_at": time.time(),
    }
    state.ever_joined = True
    if not state.read_only:
        # Every run starts with a checkpoint (none when nothing changed since the last one);
        # a full disk costs the run its checkpoint, not its start.
        try:
            state.tree.commit(hold_whiteouts=False)
            state.tree.store.mark("run", _run_label(msg), msg.get("run_id"), msg.get("role"))
        except (OSError, apsw.Error) as e:
            log.warning("no checkpoint at the start of run %s: %s", msg.get("run_id"), e)
    return {"ok": True, "daemon_pid": os.getpid(), "mountpoint": state.mountpoint}, pid


def _run_label(msg: dict[str, Any]) -> str:
    command = msg.get("command")
    label = " ".join(map(str, command)) if isinstance(command, list) else ""
    # a label is text to show: an argument's bytes that are not UTF-8 become U+FFFD
    return label.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _checkpoint(state: DaemonState, msg: dict[str, Any]) -> Reply:
    state.tree.save()
    cp = state.tree.store.mark(
        str(msg.get("kind") or "manual"),
        str(msg.get("message") or ""),
        msg.get("run_id"),
        msg.get("role"),
        always=bool(msg.get("always", True)),
    )
    return {"ok": True, "id": None if cp is None else cp.id}, None


def _rewind(state: DaemonState, msg: dict[str, Any]) -> Reply:
    # On the event loop, between two requests: no process in the view sees a mix of the two
    # states. The kernel forgets its caches after the switch, before the answer.
    tree = state.tree
    assert tree.store.history is not None
    # What the rewind changes is read from delta.db: the writes still pending count too.
    tree.save()
    target = int(msg["target"])
    if not history.exists(tree.store.conn, target):
        # (before the writers: a writer is no reason to refuse a rewind to nothing)
        return {"ok": False, "error": str(history.no_such(target)), "whole": True}, None
    writers = {int(ino): (pid, path) for pid, ino, path in msg.get("writers") or ()}
    changed = tree.store.history.changed_inodes(target)
    held = sorted(set(writers) & changed)
    if held and not msg.get("force"):
        pid, path = writers[held[0]]
        return {
            "ok": False,
            "error": f"process {pid} holds {path} open for writing, and the rewind changes it"
            " (--force rewinds anyway)",
        }, None
    kept = tree.keep_content(tree.store.history.gone_at(target))
    replaced = tree.hold_replaced(changed)
    try:
        rewound = tree.store.rewind(target, str(msg.get("kind") or "rewind"))
    except BaseException:
        tree.let_go(*kept)
        for ino in replaced:
            tree.replaced.release(ino)
        raise
    state.stale_inodes.extend(tree.reload(rewound.inodes))
    state.stale_entries.extend(rewound.entries)
    return {"ok": True, "operation": rewound.operation.id}, None


def _trim(state: DaemonState, msg: dict[str, Any]) -> Reply:
    """The retention applied to a mounted session (gc), on the event loop: no write lands
    between the commit and the trim, and the history the tree saves to is reloaded after."""
    tree = state.tree
    assert tree.store.history is not None
    tree.save()
    pruned = tree.store.history.prune(int(msg["keep"]), int(msg["max_age_ns"]), time.time_ns())
    dropped = retention.trim_log(
        tree.store.conn,
        int(msg["log_events"]),
        int(msg["log_before_ns"]),
        tree.audit.known_processes(),
    )
    try:
        shrank = tree.store.shrink(eager=True)
    except apsw.Error as e:  # a reader's snapshot, a full disk: the commit loop tries again
        log.warning("could not shrink delta.db (%s)", e)
        shrank = False
    return {"ok": True, "checkpoints": pruned, "events": dropped, "shrank": shrank}, None


def _sync(state: DaemonState, msg: dict[str, Any]) -> Reply:
    state.tree.save()
    return {"ok": True}, None


def _copy(state: DaemonState, msg: dict[str, Any]) -> Reply:
    dest = msg.get("dest")
    if not isinstance(dest, str) or not _copy_target(state, dest):
        return {"ok": False, "error": "copy goes to delta.db of a new session's dir"}, None
    # On the event loop: no request is served until the copy is whole (see services/fork.py).
    state.tree.save()
    try:
        copy_delta(state.tree.store.path, dest)
    except apsw.Error as e:
        # (SQLite's backup on a full disk says "not an error": db_error names the disk)
        return {"ok": False, "error": str(db.db_error(Path(dest), e))}, None
    except OSError as e:
        return {"ok": False, "error": f"{dest}: {_reason(e)}"}, None
    return {"ok": True}, None


def _status(state: DaemonState, msg: dict[str, Any]) -> Reply:
    return {
        "ok": True,
        "daemon_pid": os.getpid(),
        "mountpoint": state.mountpoint,
        "persistent": state.persistent,
        "read_only": state.read_only,
        # Whether the lower watch is in place (until then, answers are cached 1 s).
        "watched": state.tree.watched,
        "listing": not state.ahead.idle,
        "participants": list(state.participants.values()),
    }, None


def _drop(state: DaemonState, msg: dict[str, Any]) -> Reply:
    # Checked here, between two requests, not by the asker: a write that came in since
    # it looked must not be dropped (see `AppliedPaths.drop`).
    expect: dict[bytes, Stamp | None] = {
        os.fsencode(p): None if s is None else Stamp(int(s[0]), int(s[1]), int(s[2]))
        for p, s in (msg.get("expect") or {}).items()
    }
    dropped = state.tree.drop_applied(
        [os.fsencode(p) for p in msg.get("paths", [])],
        [os.fsencode(p) for p in msg.get("restamp", [])],
        expect,
    )
    state.stale_entries.extend(dropped.entries)
    kept = [os.fsdecode(p) for p in dropped.kept]
    return {"ok": True, "dropped": len(dropped.entries), "kept": kept}, None


def _persist(state: DaemonState, msg: dict[str, Any]) -> Reply:
    state.persistent = True
    return {"ok": True}, None


def _reason(e: OSError) -> str:
    return "no space left on its device" if e.errno == errno.ENOSPC else str(e.strerror)


def _stop_op(state: DaemonState, msg: dict[str, Any]) -> Reply:
    failed = _stop(state, "asked to", until_saved=False)
    if failed is not None:
        return {
            "ok": False,
            "error": f"cannot save the session's changes ({_reason(failed)}), so it stays"
            f" mounted at {state.mountpoint} and keeps them; free space and retry",
        }, None
    return {"ok": True}, None


def _kv(state: DaemonState, msg: dict[str, Any]) -> Reply:
    """A key-value write from inside a run, which cannot write delta.db itself."""
    key, text, stamp = msg.get("key"), msg.get("text"), msg.get("updated_ns")
    if not isinstance(key, str) or not key or not isinstance(stamp, int):
        return {"ok": False, "error": "kv takes a key and a time"}, None
    conn = state.tree.store.conn
    if text is None:
        return {"ok": True, "existed": kv_remove(conn, key)}, None
    if not isinstance(text, str):
        return {"ok": False, "error": "a kv value is JSON text"}, None
    existed = kv_get(conn, key) is not None
    kv_put(conn, key, text, stamp)
    return {"ok": True, "existed": existed}, None


HANDLERS: dict[str, Callable[[DaemonState, dict[str, Any]], Reply]] = {
    protocol.KV: _kv,
    protocol.JOIN: _join,
    protocol.STATUS: _status,
    protocol.SYNC: _sync,
    protocol.COPY: _copy,
    protocol.DROP: _drop,
    protocol.PERSIST: _persist,
    protocol.STOP: _stop_op,
    protocol.CHECKPOINT: _checkpoint,
    protocol.REWIND: _rewind,
    protocol.TRIM: _trim,
}


def _copy_target(state: DaemonState, dest: str) -> bool:
    """Whether `dest` is where a fork's delta goes: `delta.db` in a directory of this daemon's
    user beside this session's own dir, with nothing there yet (no link to follow)."""
    own_dir = os.path.dirname(os.path.abspath(state.tree.store.path))
    new_dir = os.path.dirname(dest)
    if os.path.basename(dest) != layout.DELTA or (
        os.path.dirname(new_dir) != os.path.dirname(own_dir)
    ):
        return False
    try:
        st = os.lstat(new_dir)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or new_dir == own_dir:
        return False
    return not any(os.path.lexists(dest + suffix) for suffix in ("", "-wal", "-shm"))


if __name__ == "__main__":
    sys.exit(main())
