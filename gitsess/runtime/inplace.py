"""Run a command with the session's view in place of the real worktree.

In a private mount namespace the view is bind-mounted over the worktree's real path, so the
command's cwd and every absolute path are the ones it knows. The view's `.git` is the session's
own (copy-on-write, objects shared), so git inside changes only the session; the real gitsess
state dir, when it lies in the worktree, is bound back over the view's stand-in for it (found by
name, never listed), so gitsess commands inside reach their registry at its usual path. Where
namespaces are not available the command runs in the mount point instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitsess.libc import LIBC, check

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19


def _mount(source: str | None, target: str, flags: int) -> None:
    src = None if source is None else source.encode()
    check(LIBC.mount(src, target.encode(), None, flags, None), f"mount {target}")


def _unshare() -> None:
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        check(LIBC.unshare(CLONE_NEWNS), "unshare")
        return
    # Unprivileged: a user namespace that maps us to ourselves, so files keep their owners.
    check(LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


@dataclass(frozen=True)
class Placement:
    worktree: Path
    mountpoint: Path
    read_only: bool
    # The state dir when it lies inside the worktree (the view hides it), else None.
    state_dir: Path | None = None


def _die_with(parent: int) -> None:
    """In the child: SIGTERM when `gitsess run` dies (even by SIGKILL), so that the command
    does not run on in a session nobody waits for."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _enter_view(p: Placement, cwd: Path, parent: int) -> None:
    """Runs in the child between fork and exec."""
    _die_with(parent)
    _unshare()
    _mount(None, "/", MS_REC | MS_SLAVE)
    state = p.state_dir
    state_fd = os.open(state, os.O_PATH | os.O_CLOEXEC) if state is not None else None
    _mount(str(p.mountpoint), str(p.worktree), MS_BIND)
    if p.read_only:
        _mount(None, str(p.worktree), MS_REMOUNT | MS_BIND | MS_RDONLY)
    if state is not None and state_fd is not None:
        _mount(f"/proc/self/fd/{state_fd}", str(state), MS_BIND)
        os.close(state_fd)
    os.chdir(cwd)


def view_cwd(p: Placement, cwd: Path) -> Path:
    """Where the command starts: the same directory when it is inside the worktree."""
    try:
        cwd.relative_to(p.worktree)
    except ValueError:
        return p.worktree
    return cwd


def spawn(
    argv: Sequence[str],
    p: Placement,
    *,
    cwd: Path,
    env: Mapping[str, str],
    pass_fds: tuple[int, ...] = (),
) -> tuple[subprocess.Popen[bytes], bool]:
    """Start `argv` in the view; the flag says whether it runs in place (namespaces worked)."""
    start = view_cwd(p, cwd)
    env = {**env, "PWD": str(start)}
    parent = os.getpid()
    try:
        return (
            subprocess.Popen(
                list(argv),
                env=env,
                pass_fds=pass_fds,
                preexec_fn=lambda: _enter_view(p, start, parent),
            ),
            True,
        )
    except subprocess.SubprocessError:
        pass
    fallback = p.mountpoint / start.relative_to(p.worktree)
    env["PWD"] = str(fallback)
    proc = subprocess.Popen(
        list(argv), env=env, cwd=fallback, pass_fds=pass_fds, preexec_fn=lambda: _die_with(parent)
    )
    return proc, False
