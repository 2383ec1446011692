"""Mounting a session: start its daemon (or hand the prestarted one its arguments, see
`prestart`) or join the live one, stop it, recover stale mounts.

`ensure_mounted` runs under `<session>/mount.lock` and waits for the daemon's readiness on a
pipe. The control socket's name is read from `<session>/control`, so every client function
takes the session dir. `status` returns None only once no daemon holds the session's lock (a
stopping one is waited for, by asking whether the lock is held, not by connecting, which
would fill a stopping daemon's backlog). `mount_and_join` replaces a daemon that stopped
between "live" and "join". A mount point still mounted with no daemon answering is stale and
is unmounted by the next command.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gitsess.errors import GitsessError, option
from gitsess.overlay import control, layout, mounttable, protocol
from gitsess.overlay.protocol import DaemonStatus
from gitsess.runtime import prestart

READY_TIMEOUT = 30.0
# Each attempt that finds the daemon stopping waits for it to exit and starts a new one.
JOIN_ATTEMPTS = 3
FSTYPE = "fuse.gitsess"


@dataclass(frozen=True)
class MountSpec:
    session_id: str
    lower: Path
    session_dir: Path
    hidden: tuple[str, ...] = ()  # paths relative to `lower` the view never shows
    read_only: bool = False
    persistent: bool = False
    allow_other: bool = False
    mountpoint: Path | None = None
    registry: Path | None = None  # held open by the daemon (see `overlay/daemon._hold`)

    @property
    def delta(self) -> Path:
        return self.session_dir / layout.DELTA

    @property
    def target(self) -> Path:
        return self.mountpoint or self.session_dir / layout.MOUNTPOINT

    @property
    def log(self) -> Path:
        return self.session_dir / layout.DAEMON_LOG


class DaemonStopping(GitsessError):
    """The daemon decided to stop just as it was asked to take a participant in."""


def status(session_dir: Path) -> DaemonStatus | None:
    """The live daemon's view of itself, or None when the session is not mounted.

    None also means that no daemon writes delta.db any more: one that is stopping is waited for
    until it exited, after its last commit.
    """
    try:
        reply = protocol.status(str(session_dir))
    except ConnectionError:
        # It stopped with our request unread: it closes the connection as it exits.
        _wait_gone(session_dir)
        return None
    except OSError:
        return None
    except protocol.Refused as e:
        if e.stopping:
            _wait_gone(session_dir)
        return None
    if reply is None:
        # No listener, yet a daemon may hold the session: one past its last answer that is
        # still making its last commit, or one starting that listens in a moment.
        return _status_once_listening_or_gone(session_dir)
    return reply


def _status_once_listening_or_gone(session_dir: Path) -> DaemonStatus | None:
    def listening() -> DaemonStatus | None:
        with contextlib.suppress(OSError, protocol.Refused):
            return protocol.status(str(session_dir))
        return None

    return _while_held(session_dir, listening, "holds it but has not answered for")


def _wait_gone(session_dir: Path) -> None:
    _while_held(session_dir, lambda: None, "is stopping but has not exited after")


def _while_held(
    session_dir: Path, ask: Callable[[], DaemonStatus | None], stuck: str
) -> DaemonStatus | None:
    """Wait while a daemon holds the session (`control.serving`), at most READY_TIMEOUT: None
    once none does, or the first answer `ask` gives meanwhile."""
    deadline = time.monotonic() + READY_TIMEOUT
    while control.serving(str(session_dir)):
        if time.monotonic() > deadline:
            raise GitsessError(
                f"the daemon of session {session_dir.name} {stuck} {READY_TIMEOUT:.0f} s"
            )
        time.sleep(0.01)
        answer = ask()
        if answer is not None:
            return answer
    return None


def sync(session_dir: Path) -> bool:
    """Ask a live daemon to commit everything now, so delta.db readers see the latest state."""
    try:
        return protocol.sync(str(session_dir))
    except protocol.Refused:
        return True  # it answered; what it could not commit stays pending in it
    except (OSError, ConnectionError):
        return False


# A copy of a session's changes may be gigabytes of data files.
COPY_TIMEOUT = 3600.0


def copy_delta(session_dir: Path, dest_dir: Path) -> bool:
    """Have the live daemon copy its delta (delta.db and data files) into `dest_dir`, serving no
    request meanwhile, so no write lands in the copy in part; False when no daemon serves it."""
    try:
        return protocol.copy(str(session_dir), str(dest_dir / layout.DELTA), COPY_TIMEOUT)
    except ConnectionError:
        # It was stopping (its last participant had just left) and closed with our request
        # unread: once it is gone, after its last commit, the caller copies delta.db itself.
        _wait_gone(session_dir)
        return False
    except (OSError, protocol.Refused) as e:
        raise GitsessError(f"copying the live session's changes: {e}") from e


@contextlib.contextmanager
def locked(session_dir: Path) -> Iterator[None]:
    """Serialises mounting with offline changes to delta.db (no daemon starts meanwhile)."""
    with open(session_dir / "mount.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_mounted(spec: MountSpec) -> DaemonStatus:
    """Mount the session unless its daemon already serves it; return the live status."""
    with locked(spec.session_dir):
        live = status(spec.session_dir)
        if live is not None and spec.persistent and not live.persistent:
            live = live if _persist(spec.session_dir) else None
        if live is not None:
            prestart.discard()
            return live
        clean_stale(spec.target)
        _start_daemon(spec)
        live = status(spec.session_dir)
        if live is None:
            raise GitsessError(f"the session daemon exited right after mounting; see {spec.log}")
        return live


def _persist(session_dir: Path) -> bool:
    """Make the live daemon stay without participants; False when it was stopping (and is
    gone now)."""
    try:
        answered = protocol.persist(str(session_dir))
    except ConnectionError:
        answered = False
    except protocol.Refused as e:
        answered = not e.stopping
    if answered:
        return True
    _wait_gone(session_dir)
    return False


def allow_other_permitted(conf: Path = Path("/etc/fuse.conf")) -> bool:
    """Whether fusermount3 lets this user mount with allow_other (root always may)."""
    if os.geteuid() == 0:
        return True
    try:
        lines = conf.read_text(errors="replace").splitlines()
    except OSError:
        return False
    return any(line.strip() == "user_allow_other" for line in lines)


def _start_daemon(spec: MountSpec) -> None:
    if spec.allow_other and not allow_other_permitted():
        raise GitsessError(
            f"{option('allow-other')} needs `user_allow_other` in /etc/fuse.conf, which it lacks."
            " Fix (as root): echo user_allow_other >> /etc/fuse.conf"
        )
    spec.target.mkdir(mode=0o700, parents=True, exist_ok=True)
    args = [
        "--session-id",
        spec.session_id,
        "--lower",
        str(spec.lower),
        "--delta",
        str(spec.delta),
        "--mountpoint",
        str(spec.target),
    ]
    for rel in spec.hidden:
        args += ["--hide", rel]
    if spec.registry is not None:
        args += ["--registry", str(spec.registry)]
    for flag, on in (
        ("--persistent", spec.persistent),
        ("--read-only", spec.read_only),
        ("--allow-other", spec.allow_other),
    ):
        if on:
            args.append(flag)
    read_end = prestart.hand_over(args, spec.log)
    if read_end is None:
        import subprocess

        read_end, write_end = os.pipe()
        with open(spec.log, "ab") as log:
            subprocess.Popen(
                [
                    sys.executable,
                    "-P",  # no current directory on sys.path: the repository's types.py is not ours
                    "-m",
                    prestart.DAEMON_MODULE,
                    *args,
                    "--ready-fd",
                    str(write_end),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        os.close(write_end)
    try:
        answer = _read_ready(read_end)
    finally:
        os.close(read_end)
    if answer == "ready" or answer == "busy":
        return
    detail = answer or _log_tail(spec.log)
    raise GitsessError(f"could not mount the session: {detail} (log: {spec.log})")


def _read_ready(fd: int) -> str:
    deadline = time.monotonic() + READY_TIMEOUT
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return "timed out waiting for the daemon"
        part = os.read(fd, 4096)
        if not part:
            break
        buf += part
    return buf.decode(errors="replace").strip()


def _log_tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "the daemon exited"
    return lines[-1] if lines else "the daemon exited"


def join(session_dir: Path, participant: protocol.Joiner) -> socket.socket:
    """Register a participant. The returned connection is the registration: keep it open (and
    inheritable by the command) for as long as the participant uses the mount."""
    sock = control.connect(str(session_dir))
    if sock is None:
        raise DaemonStopping("the session daemon is not running")
    try:
        protocol.join(sock, participant)
    except ConnectionError:
        sock.close()
        raise DaemonStopping("the session daemon stopped") from None
    except protocol.Refused as e:
        sock.close()
        if e.stopping:
            raise DaemonStopping(str(e)) from None
        raise GitsessError(f"the session daemon refused: {e}") from None
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def mount_and_join(
    spec: MountSpec, participant: protocol.Joiner
) -> tuple[DaemonStatus, socket.socket]:
    """`ensure_mounted`, then `join`; a daemon that stops in between is replaced by a new one."""
    attempts = JOIN_ATTEMPTS
    while True:
        live = ensure_mounted(spec)
        try:
            return live, join(spec.session_dir, participant)
        except DaemonStopping:
            attempts -= 1
            if not attempts:
                raise


def stop(session_dir: Path, mountpoint: Path, timeout: float = 10.0) -> bool:
    """Stop the daemon (it commits and unmounts); True when something was mounted."""
    live = status(session_dir)
    if live is None:
        return clean_stale(mountpoint)
    try:
        protocol.stop(str(session_dir))
    except (OSError, ConnectionError):
        pass
    except protocol.Refused as e:
        # It could not save the changes it holds (a full disk): it stays, and so do they.
        raise GitsessError(str(e)) from None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not control.serving(str(session_dir)) and not mounttable.is_mount_point(mountpoint):
            return True
        time.sleep(0.05)
    # Only while it still holds the session: a daemon that exited may have left its number to
    # another process by now.
    if control.holder(str(session_dir)) == live.daemon_pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(live.daemon_pid, 9)
    clean_stale(mountpoint)
    return True


def clean_stale(mountpoint: Path) -> bool:
    """Unmount a view whose daemon is gone (the mount answers ENOTCONN); True if it did."""
    if not mounttable.is_mount_point(mountpoint):
        return False
    try:
        os.stat(mountpoint)
    except OSError as e:
        if e.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO):
            raise
    unmount(mountpoint)
    return True


def unmount(mountpoint: Path) -> None:
    # Here, not at the top: `ls` and `show` load this module and never unmount.
    import shutil
    import subprocess

    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    if tool is None:
        raise GitsessError("fusermount3 is missing: install the fuse3 package")
    subprocess.run([tool, "-uz", str(mountpoint)], check=False, capture_output=True)
