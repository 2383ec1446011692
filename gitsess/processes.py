"""Processes by pid: whether one still runs, what /proc says of it; for what a process that is
gone left behind."""

from __future__ import annotations

import os
from collections.abc import Mapping


def alive(pid: int) -> bool:
    """Whether `pid` names a process (another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/`pid`/stat after the command's name: its state first, its start
    time (clock ticks after boot) at index 19."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()


def started_at(pid: int) -> float:
    """When `pid`'s process started (seconds since the epoch). OSError when there is none."""
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + int(stat_fields(pid)[19]) / os.sysconf("SC_CLK_TCK")


def writers_on(device: int) -> list[tuple[int, int, str]]:
    """(pid, inode, path) of every file of filesystem `device` some process holds open for
    writing, as far as /proc shows this user (processes come and go while it looks)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = f"/proc/{name}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd}")
                if st.st_dev != device:
                    continue
                with open(f"/proc/{name}/fdinfo/{fd}") as f:
                    flags = next(int(line.split()[1], 8) for line in f if line.startswith("flags:"))
                if flags & os.O_ACCMODE == os.O_RDONLY:
                    continue
                found.append((int(name), st.st_ino, os.readlink(f"{fd_dir}/{fd}")))
            except (OSError, StopIteration, ValueError):
                continue
    return found


def with_env(pairs: Mapping[str, str]) -> list[int]:
    """The processes (this user's: others' environments are unreadable) whose environment
    holds every one of `pairs`; what a killed parent left running, found by what it gave them."""
    wanted = {f"{k}={v}".encode() for k, v in pairs.items()}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue  # gone meanwhile, or another user's
        if wanted <= env:
            found.append(int(name))
    return sorted(found)
