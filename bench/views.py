"""The three views of one tree (native, fuse-overlayfs, a gitsess mount) and the daemons' CPU
time and peak memory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.config import GITSESS, NATIVE, OVERLAYFS
from gitsess.overlay import mounttable
from gitsess.runtime import mount, prestart, spare

# ---------------------------------------------------------------------------------- views


@dataclass(frozen=True)
class View:
    """One target's view of a tree: where to work, and which process serves it."""

    target: str
    root: Path
    pid: int | None = None  # the FUSE daemon, None for the native directory
    upper: Path | None = None  # fuse-overlayfs: where its changes are

    def peak_kib(self) -> int | None:
        return peak_memory_kib(self.pid) if self.pid is not None else None

    def cpu_seconds(self) -> float | None:
        return daemon_cpu_seconds(self.pid) if self.pid is not None else None


def peak_memory_kib(pid: int) -> int | None:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def daemon_cpu_seconds(pid: int) -> float | None:
    """User and system time of every thread of process `pid` so far (listing threads that
    ended are counted in the process's own figures too)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
        utime, stime = fields[11:13]  # fields 14 and 15 of proc(5), after pid and comm
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")
    return None


def _kill_if(pid: int, *markers: str) -> None:
    """SIGKILL `pid` if it still is the process we started (its command line has a marker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return
    if any(marker.encode() in cmdline for marker in markers):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _force_unmount(path: Path) -> None:
    if mounttable.is_mount_point(path):
        subprocess.run(["fusermount3", "-uz", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def native_view(lower: Path) -> Iterator[View]:
    yield View(NATIVE, lower)


@contextlib.contextmanager
def overlayfs_view(lower: Path, scratch: Path) -> Iterator[View]:
    base = Path(tempfile.mkdtemp(prefix="ovl-", dir=scratch))
    upper, work, mnt = base / "upper", base / "work", base / "mnt"
    for d in (upper, work, mnt):
        d.mkdir()
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    proc = subprocess.Popen(
        ["fuse-overlayfs", "-f", "-o", opts, str(mnt)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not mounttable.is_mount_point(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fuse-overlayfs did not mount {mnt}")
            time.sleep(0.01)
        yield View(OVERLAYFS, mnt, proc.pid, upper)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False, capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _force_unmount(mnt)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def gitsess_view(lower: Path, scratch: Path, profile: Path | None = None) -> Iterator[View]:
    """A fresh session over `lower`; with `profile`, its daemon runs under cProfile and leaves
    its stats there when it stops."""
    session_dir = Path(tempfile.mkdtemp(prefix="sess-", dir=scratch))
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()), lower=lower, session_dir=session_dir, persistent=True
    )
    with gitsess_mounted(spec, profile) as pid:
        yield View(GITSESS, spec.target, pid)
    shutil.rmtree(session_dir, ignore_errors=True)


@contextlib.contextmanager
def gitsess_mounted(spec: mount.MountSpec, profile: Path | None = None) -> Iterator[int]:
    """Mount a session view; always stop it, and never leave its daemon or mount behind."""
    pid: int | None = None
    try:
        if profile is None:
            pid = mount.ensure_mounted(spec).daemon_pid
        else:
            pid = _start_profiled_daemon(spec, profile)
        yield pid
    finally:
        ensure_stopped(spec, pid)


def ensure_stopped(spec: mount.MountSpec, pid: int | None) -> None:
    """Stop the session's daemon if it still runs, then make sure of it: kill the daemon we
    know of and lazily unmount whatever is left."""
    try:
        mount.stop(spec.session_dir, spec.target)
    finally:
        if pid is not None and not _exited(pid, timeout=30):
            # `gitsess mount` has the spare fork its daemon, which then shows as the spare
            _kill_if(pid, prestart.DAEMON_MODULE, spare.MODULE)
        _force_unmount(spec.target)


def _exited(pid: int, timeout: float) -> bool:
    """Wait until `pid` is gone or a zombie (a daemon under cProfile still writes its stats
    after it has unmounted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def _start_profiled_daemon(spec: mount.MountSpec, profile: Path) -> int:
    """What `mount.ensure_mounted` does, with the daemon under `python -m cProfile`."""
    spec.target.mkdir(mode=0o700, parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    cmd = [
        sys.executable, "-m", "cProfile", "-o", str(profile), "-m", prestart.DAEMON_MODULE,
        "--session-id", spec.session_id, "--lower", str(spec.lower), "--delta", str(spec.delta),
        "--mountpoint", str(spec.target), "--persistent", "--ready-fd", str(write_end),
    ]  # fmt: skip
    with open(spec.log, "ab") as log:
        subprocess.Popen(cmd, stdout=log, stderr=log, pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        answer = ready.readline().strip()
    live = mount.status(spec.session_dir)
    if answer != b"ready" or live is None:
        raise RuntimeError(f"the profiled daemon did not start: {answer!r}, see {spec.log}")
    return live.daemon_pid
