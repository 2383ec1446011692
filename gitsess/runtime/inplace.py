"""Run a command with the session's view in place of the real worktree, sealed in.

In a private mount namespace the view is bind-mounted over the worktree's real path, so the
command's cwd and every absolute path are the ones it knows. The view's `.git` is the session's
own (copy-on-write), so git inside changes only the session. The real gitsess state dir is bound
read-only at its real path (over the view's stand-in for it when it lies in the worktree: found
by name, never listed): gitsess commands inside read their registry and delta there, and write
only through the session's daemon (`kv`), so a run can neither destroy a session's delta nor
plant an apply journal. For a linked worktree the view's common dir is bound over the real
common dir too (outside the worktree, it would stay writable) and the view's `.git` file leads
git to its admin dir below that path (`_point_at_common`), where git names the main worktree,
and takes this one for the current one, as it does outside. The command gets a PID namespace of
its own with a fresh /proc: no outside process is visible, so no `/proc/<pid>/root` (or `cwd`,
`fd`) leads out of the view. Last, a user namespace of its own locks every mount it inherits: it
can neither unmount the view nor remount the state dir writable (mounts copied into a less
privileged namespace are locked, MNT_LOCKED and the locked flags). An agent's own isolation root
(`homes/<uuid>`) is bound writable again over the sealed state dir, and so is the session's
object store, which the view's `.git/objects` links to; the real store it borrows is bound
read-only where its `info/alternates` names it (`_bind_objects`, `overlay/objectdir.py`). A
read-only run's view (and store) is remounted read-only: the kernel answers EROFS even when it
joins a writable live session, so the daemon needs no per-request look at who writes. Where any
step fails, `spawn` refuses before the command starts, with the reason: it never falls back to
running in the mount point, where absolute paths reach the real tree. `gitsess doctor` tries the
same steps on temporary directories ("runs in place"). What a run does not isolate: see the
README.

The processes, each forked from the one before (the first by `subprocess.Popen`):

- the outer process (Popen's child): mount namespace and mounts, then `unshare(CLONE_NEWPID)`;
  it relays SIGTERM and SIGHUP to the init and ends as the command ended;
- the init, pid 1 of the new namespace: mounts /proc, enters the locking user namespace (whose
  id maps the outer process writes), relays signals to the command, reaps orphans, and tells the
  outer process how the command ended; when it exits the kernel kills what is left in the
  namespace, so nothing a run started outlives it;
- the command, pid 2, which Popen's child code then execs.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from gitsess.errors import GitsessError
from gitsess.libc import LIBC, check
from gitsess.overlay import objectdir
from gitsess.overlay.gitdir import GIT_COMMON

PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
# The flags of a mount (statvfs's f_flag has them at the same bits) a remount must keep: in a
# user namespace, dropping one the mount has is refused.
KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # noatime, nodiratime, relatime
RELAYED = (signal.SIGTERM, signal.SIGHUP)
FULL_RANGE = 4294967295


def _mount(source: str | None, target: str, flags: int, fstype: str | None = None) -> None:
    src = None if source is None else source.encode()
    kind = None if fstype is None else fstype.encode()
    check(LIBC.mount(src, target.encode(), kind, flags, None), f"mount {target}")


def _remount_read_only(target: str) -> None:
    kept = os.statvfs(target).f_flag & KEPT_FLAGS
    _mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def _mounts_below(top: str) -> list[str]:
    """The outermost mount points strictly below `top` (mountinfo's escapes undone)."""
    found: list[str] = []
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            point = _unescape(line.split(b" ")[4])
            if point.startswith(top.rstrip("/") + "/"):
                found.append(point)
    outermost: list[str] = []
    for point in sorted(found):
        if not any(point.startswith(o + "/") or point == o for o in outermost):
            outermost.append(point)
    return outermost


def _unescape(field: bytes) -> str:
    out, i = bytearray(), 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))


def _map_ids(pid: int | str, ids: tuple[int, int], root: bool, proc: int | None = None) -> None:
    """The id maps of `pid`'s new user namespace: everyone as they are for root, else the
    user alone, `ids` (all an unprivileged process may map). `proc`: a descriptor of the
    /proc to use (the process's own may show another PID namespace by then)."""
    uid, gid = ids
    if root:
        maps = {"uid_map": f"0 0 {FULL_RANGE}", "gid_map": f"0 0 {FULL_RANGE}"}
    else:
        maps = {"setgroups": "deny", "uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
    for name, text in maps.items():
        fd = os.open(f"{pid}/{name}" if proc is not None else f"/proc/{pid}/{name}",
                     os.O_WRONLY | os.O_CLOEXEC, dir_fd=proc)  # fmt: skip
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _unshare() -> None:
    ids = os.getuid(), os.getgid()  # (read before: in the new namespace they are unmapped)
    if ids[0] == 0:
        check(LIBC.unshare(CLONE_NEWNS), "unshare")
        return
    # Unprivileged: a user namespace that maps us to ourselves, so files keep their owners.
    check(LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    _map_ids("self", ids, root=False)


@dataclass(frozen=True)
class Placement:
    worktree: Path
    mountpoint: Path
    read_only: bool
    # The real state dir, bound read-only at its real path (inside the worktree too, where the
    # view hides it).
    state_dir: Path | None = None
    # Directories in the state dir that stay writable: the agent's own isolation root.
    writable: tuple[Path, ...] = ()
    # A linked worktree's real common dir, by its real path (see `_bind_common`).
    common: Path | None = None
    # The session's dir, whose object store is bound writable (`_bind_objects`).
    session_dir: Path | None = None


def _die_with(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child: `sig` when `parent` dies (even by SIGKILL), so that the command does not
    run on in a session nobody waits for."""
    LIBC.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:  # it died before the line above
        os.kill(os.getpid(), sig)


def _enter_view(p: Placement, cwd: Path, parent: int, reason_fd: int) -> None:
    """Runs in Popen's child between fork and exec; returns in the command's process only."""
    try:
        _die_with(parent)
        _unshare()
        _mount(None, "/", MS_REC | MS_SLAVE)
        state = p.state_dir
        # A worktree gitsess made lies in the state dir (`worktrees/`): the view goes over it
        # after the seal, else before (the state dir in the view is the one to seal then).
        # (The view is opened first: the seal covers the mounts below the state dir.)
        state_first = state is not None and p.worktree.is_relative_to(state)
        view_fd = os.open(p.mountpoint, os.O_PATH | os.O_CLOEXEC)
        # Opened before the seal too: a bind of a path in the sealed tree would be read-only.
        own = [(w, os.open(w, os.O_PATH | os.O_CLOEXEC)) for w in p.writable]
        # And before the common dir is bound: the state dir may lie below the real one.
        state_fd = os.open(state, os.O_PATH | os.O_CLOEXEC) if state is not None else None
        # And before the view hides the real object store's path.
        stores = _open_stores(p.session_dir)
        common = _bind_common(p, view_fd)
        if state is not None and state_fd is not None and state_first:
            _seal(state, state_fd)
        _mount(f"/proc/self/fd/{view_fd}", str(p.worktree), MS_BIND)
        os.close(view_fd)
        if p.read_only:
            _remount_read_only(str(p.worktree))
        if state is not None and state_fd is not None and not state_first:
            _seal(state, state_fd)
        if common is not None:
            _point_at_common(p.mountpoint, common)
        for path, fd in own:
            _mount(f"/proc/self/fd/{fd}", str(path), MS_BIND)
            os.close(fd)
        if p.session_dir is not None and stores is not None:
            _bind_objects(p.session_dir, stores, p.read_only)
        check(LIBC.unshare(CLONE_NEWPID), "unshare")
    except OSError as e:
        os.write(reason_fd, str(e).encode())
        raise
    _fork_init(reason_fd)
    try:
        os.chdir(cwd)
    except OSError as e:  # (gone since `spawn` looked)
        os.write(reason_fd, f"{cwd}: {e.strerror}".encode())
        raise


def _bind_common(p: Placement, view_fd: int) -> Path | None:
    """For a linked worktree: bind the view's `.GIT` over the real common dir (read-only
    in a read-only run), so that the real one is out of reach and git can find the view's at
    the path it has outside, where it names the main worktree after it. Returns that path, or
    None when the view's was not bound: a main worktree, or a view that holds no common dir
    (then the real one is sealed read-only)."""
    if p.common is None:
        return None
    try:
        # Not followed: a symlink the session put there could lead to the real one itself.
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(GIT_COMMON, flags, dir_fd=view_fd)
    except OSError:
        # The session moved or replaced its common dir: the real one is sealed read-only, as
        # the state dir is, never left writable (git inside finds no common dir, as in the
        # view).
        _seal(p.common, os.open(p.common, os.O_PATH | os.O_CLOEXEC))
        return None
    _mount(f"/proc/self/fd/{fd}", str(p.common), MS_BIND)
    os.close(fd)
    if p.read_only:
        _remount_read_only(str(p.common))
    return p.common


def _open_stores(session_dir: Path | None) -> tuple[int, int] | None:
    """The session's object store and the real one it borrows (`overlay/objectdir.py`),
    opened (its daemon made them before the view was mounted); None without a session dir
    (`gitsess doctor`'s trial of the steps)."""
    if session_dir is None:
        return None
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    store = os.open(session_dir / os.fsdecode(objectdir.STORE), flags | os.O_NOFOLLOW)
    try:
        # (followed: outside a run, the session's symlink to the real store)
        real = os.open(session_dir / os.fsdecode(objectdir.REAL), flags)
    except OSError:
        os.close(store)
        raise
    return store, real


def _bind_objects(session_dir: Path, stores: tuple[int, int], read_only: bool) -> None:
    """The session's object store bound writable over its path in the sealed state dir (where
    the view's symlink leads git), read-only in a read-only run; and the real store bound
    read-only where the session's `info/alternates` names it, on a read-only tmpfs over the
    session's `lower` dir (outside, a symlink there leads to it)."""
    store, real = stores
    at = str(session_dir / os.fsdecode(objectdir.STORE))
    _mount(f"/proc/self/fd/{store}", at, MS_BIND)
    os.close(store)
    if read_only:
        _remount_read_only(at)
    lower = session_dir / os.fsdecode(objectdir.LOWER)
    _mount("none", str(lower), MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs")
    borrowed = session_dir / os.fsdecode(objectdir.REAL)
    os.mkdir(borrowed)
    _mount(f"/proc/self/fd/{real}", str(borrowed), MS_BIND)
    os.close(real)
    _remount_read_only(str(borrowed))
    _remount_read_only(str(lower))


def _point_at_common(mountpoint: Path, common: Path) -> None:
    """The view's `.git` file names its admin dir by its path at the mount point,
    `<mountpoint>/.GIT/worktrees/<id>` (`gitdir.name_git_dir_at`); here a read-only tmpfs there
    makes `<mountpoint>/.GIT` a symlink to `common`, so git resolves its git dir to
    `<common>/worktrees/<id>`, below the real common dir's path, where the view's is bound. (Not
    a bind over the view's `.git`: the daemon's invalidation of that name would detach it, and
    `rm -rf .git` would meet a mount point.)"""
    _mount("none", str(mountpoint), MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs")
    os.symlink(common, mountpoint / os.fsdecode(GIT_COMMON))
    _remount_read_only(str(mountpoint))


def _seal(state: Path, state_fd: int) -> None:
    """Bind the state dir `state_fd` opened read-only at `state`. Recursive: as a user, a bind
    that would uncover what the views mounted below it hide is refused (EINVAL: locked
    children). Those mounts, other sessions' views among them, are then covered by empty
    read-only ones."""
    _mount(f"/proc/self/fd/{state_fd}", str(state), MS_BIND | MS_REC)
    os.close(state_fd)
    _remount_read_only(str(state))
    for below in _mounts_below(str(state)):
        _mount("none", below, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs")


def _fork_init(reason_fd: int) -> None:
    """Fork the init of the new PID namespace; this process relays to it. Returns in the
    command's process only."""
    root = os.getuid() == 0
    outer = os.getpid()
    # The /proc of this process's PID namespace: the init mounts the new one over it.
    proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    ended_r, ended_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    unshared_r, unshared_w = os.pipe()
    # Blocked in the init until it has its relaying handlers: a signal to the pid 1 of a
    # namespace from outside it is dropped while its action is the default, unless blocked,
    # which keeps it pending. (A SIGTERM relayed meanwhile, `gitsess run` killed as the
    # command started, was lost, and the command ran on.)
    signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)
    init = os.fork()
    if init:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
        for fd in (ended_w, mapped_r, unshared_w):
            os.close(fd)
        ok = os.read(unshared_r, 1) == b"u"
        if ok:
            try:
                _map_ids(init, (os.getuid(), os.getgid()), root, proc)
            except OSError as e:
                os.write(reason_fd, f"user namespace: {e}".encode())
                ok = False
        os.write(mapped_w, b"m" if ok else b"x")
        _close_all_but(ended_r)
        _relay(init, ended_r)
    for fd in (ended_r, mapped_w, unshared_r, proc):
        os.close(fd)
    _die_with(outer, signal.SIGKILL)
    # A failure here is raised into Popen's child code, which reports it through its error
    # pipe: Popen then raises, as for a failure in the outer process.
    try:
        _mount("proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "proc")
        check(LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    except OSError as e:
        os.write(reason_fd, str(e).encode())
        os.write(unshared_w, b"x")
        raise
    os.write(unshared_w, b"u")
    if os.read(mapped_r, 1) != b"m":
        raise OSError("the ids of the run's user namespace could not be mapped")
    for fd in (mapped_r, unshared_w):
        os.close(fd)
    command = os.fork()
    if command:
        _close_all_but(ended_w)
        _init(command, ended_w)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
    os.close(ended_w)


def _close_all_but(fd: int) -> None:
    """The relaying processes keep only stdio and `fd`: not Popen's error pipe (whose end
    tells it the command was exec'd), nor the participant's connection."""
    os.closerange(3, fd)
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))


def _relay(init: int, ended_r: int) -> NoReturn:
    """The outer process: pass SIGTERM and SIGHUP on, then end as the command ended."""
    for sig in (signal.SIGINT, signal.SIGQUIT):  # the terminal sends these to the command
        signal.signal(sig, signal.SIG_IGN)
    for sig in RELAYED:
        signal.signal(sig, lambda signum, _frame: os.kill(init, signum))
    os.waitpid(init, 0)
    told = os.read(ended_r, 4)
    status = struct.unpack("i", told)[0] if len(told) == 4 else 255 << 8
    if os.WIFSIGNALED(status):
        ended_by = os.WTERMSIG(status)
        if ended_by != signal.SIGKILL:  # (which has no handler to reset)
            signal.signal(ended_by, signal.SIG_DFL)
        os.kill(os.getpid(), ended_by)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 255)


def _init(command: int, ended_w: int) -> NoReturn:
    """Pid 1: relay signals to the command, reap every orphan, and once the command ended
    say how (its wait status) and exit, which ends the namespace."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    for sig in RELAYED:
        signal.signal(sig, lambda signum, _frame: os.kill(command, signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)
    while True:
        pid, status = os.wait()
        if pid == command:
            os.write(ended_w, struct.pack("i", status))
            os._exit(0)


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
) -> subprocess.Popen[bytes]:
    """Start `argv` in the view, in place; refused with the reason where it cannot be (it
    never runs where absolute paths would reach the real tree)."""
    start = view_cwd(p, cwd)
    if not (p.mountpoint / start.relative_to(p.worktree)).is_dir():
        raise GitsessError(
            f"{start} is not a directory in the session's view (the session removed or replaced "
            f"it): run from one the view has, such as {p.worktree}"
        )
    env = {**env, "PWD": str(start)}
    parent = os.getpid()
    reason_r, reason_w = os.pipe2(os.O_CLOEXEC)
    try:
        return subprocess.Popen(
            list(argv),
            env=env,
            pass_fds=pass_fds,
            preexec_fn=lambda: _enter_view(p, start, parent, reason_w),
        )
    except subprocess.SubprocessError:
        os.close(reason_w)
        reason_w = -1
        reason = os.read(reason_r, 4096).decode(errors="replace") or "unknown"
        raise GitsessError(
            f"cannot run in place (the view over {p.worktree} in a namespace of its own): "
            f"{reason}; see `gitsess doctor`"
        ) from None
    finally:
        os.close(reason_r)
        if reason_w >= 0:
            os.close(reason_w)
