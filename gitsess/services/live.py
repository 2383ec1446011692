"""Live sessions: run a command inside one, keep it mounted, list and stop mounts.

The overlay's tree and the mount namespace code are imported by the services that use them:
`gitsess mount` and `gitsess new --mount` need neither.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gitsess.errors import GitsessError, option
from gitsess.git.location import RepoContext
from gitsess.git.view import Stamp
from gitsess.overlay import fsmonitor_hook, protocol
from gitsess.runtime import mount, strays
from gitsess.runtime.strays import Stray as Stray  # (re-exported: `ps` renders it)
from gitsess.services.handle import SessionHandle, worktree_gone
from gitsess.store.registry import Session


def hidden_paths(ctx: RepoContext, session: Session) -> tuple[str, ...]:
    """The state dir, when it lies inside the worktree, never shows in the view."""
    return SessionHandle(ctx, session).hidden()


def spec_for(
    ctx: RepoContext,
    session: Session,
    *,
    read_only: bool = False,
    persistent: bool = False,
    allow_other: bool = False,
    mountpoint: Path | None = None,
) -> mount.MountSpec:
    if not session.worktree.is_dir():
        raise worktree_gone(session)
    session_dir = ctx.session_dir(session.id)
    if not session_dir.is_dir() or session_dir.is_symlink():
        raise GitsessError(
            f"session {session.name}'s directory {session_dir} is gone, and its changes with "
            f"it; `gitsess rm {session.name}` removes the session"
        )
    return mount.MountSpec(
        session_id=session.id,
        lower=session.worktree,
        session_dir=ctx.session_dir(session.id),
        hidden=hidden_paths(ctx, session),
        read_only=read_only,
        persistent=persistent,
        allow_other=allow_other,
        mountpoint=mountpoint,
        registry=ctx.registry_path,
    )


def session_env(
    ctx: RepoContext, session: Session, mountpoint: str, env: Mapping[str, str]
) -> dict[str, str]:
    return {
        "GITSESS_SESSION": session.name,
        "GITSESS_SESSION_ID": session.id,
        "GITSESS_MOUNT": mountpoint,
        "GITSESS_DIR": str(ctx.state_dir),
        **git_config_env(env, git_config_for(session.worktree)),
    }


# The untracked cache spares git the directory listings, which FUSE cannot cache. On big trees
# git also asks the daemon what changed instead of checking every file: starting the hook costs
# more than the check below about this many files. Set through the environment, so the user's
# git config is never touched.
# git makes a loose object as a temporary file, then links it in and unlinks the temporary name;
# a rename instead (git's own setting for filesystems where links are unreliable) is a FUSE
# request or two less of some eleven per object: `git add -A && git commit` of 5,000 files
# inside sent 71,000 requests instead of 83,000. What it gives up, git's refusal to replace an
# object file that exists, is moot there: git looks for an object before it writes one.
# No automatic maintenance: after a commit git starts `git maintenance run --auto`, which
# counts loose objects, and once past `gc.auto` or `gc.autoPackLimit` repacks the session's
# store on its own. A session's objects are temporary; apply promotes the few a commit needs.
# An explicit `git gc` or `git maintenance run` inside still works.
FSMONITOR_MIN_FILES = 1_000
UNTRACKED_CACHE_CONFIG = {
    "core.untrackedCache": "true",
    "core.createObject": "rename",
    "maintenance.auto": "false",
}
PYTHON_HOOK = f"{shlex.quote(sys.executable)} -S -E {shlex.quote(fsmonitor_hook.__file__)}"
COMPILED_HOOK = os.path.join(os.path.dirname(fsmonitor_hook.__file__), fsmonitor_hook.COMPILED)


def hook_command() -> str:
    """git's `core.fsmonitor`: the compiled hook when the install built it (about 1 ms a
    status, where starting Python took 15-23), else the Python one."""
    if os.access(COMPILED_HOOK, os.X_OK):
        return shlex.quote(COMPILED_HOOK)
    return PYTHON_HOOK


# With the daemon's answer git has every unchanged entry marked valid, and its preload of the
# index starts up to twenty threads (one per 500 entries) that only skip those: some 1 ms of
# a 25 ms commit inside, twice a commit. Without preload git stats the few entries the answer
# named itself; an answer of "everything" (no watch in place) stats every entry in one thread,
# as fast here as in ten (a warm view: the kernel answers the stats; the daemon serves one
# request at a time in any case).
FSMONITOR_CONFIG = {
    "core.fsmonitor": hook_command(),
    "core.preloadIndex": "false",
    **UNTRACKED_CACHE_CONFIG,
}


def git_config_for(worktree: Path) -> dict[str, str]:
    from gitsess.git.repo import git_dir, open_worktree

    try:
        gitdir = git_dir(open_worktree(worktree))
        with open(gitdir / "index", "rb") as f:
            header = f.read(12)
    except (OSError, GitsessError):
        return UNTRACKED_CACHE_CONFIG
    files = int.from_bytes(header[8:12], "big") if header[:4] == b"DIRC" else 0
    return FSMONITOR_CONFIG if files >= FSMONITOR_MIN_FILES else UNTRACKED_CACHE_CONFIG


def git_config_env(env: Mapping[str, str], config: Mapping[str, str]) -> dict[str, str]:
    """`GIT_CONFIG_COUNT`/`KEY_n`/`VALUE_n` entries adding `config` after any already set."""
    try:
        start = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        start = 0
    out = {"GIT_CONFIG_COUNT": str(start + len(config))}
    for i, (key, value) in enumerate(config.items(), start=start):
        out[f"GIT_CONFIG_KEY_{i}"] = key
        out[f"GIT_CONFIG_VALUE_{i}"] = value
    return out


@dataclass(frozen=True)
class RunResult:
    exit_code: int


def run(
    ctx: RepoContext,
    session: Session,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    read_only: bool = False,
    role: str | None = None,
    run_id: int | None = None,
    own_state: Path | None = None,
) -> RunResult:
    """Run `argv` inside the session's view, mounting it first unless it is live.

    The participant registration is a connection the command inherits: the daemon keeps the
    view mounted while the command or anything it started still holds it. `own_state`: the
    agent's isolation root, which stays writable inside (the rest of the state dir does not).
    """
    from gitsess.runtime import inplace

    spec = spec_for(ctx, session)
    live, conn = mount.mount_and_join(
        spec, protocol.Joiner(os.getpid(), role, read_only, list(argv), run_id)
    )
    hidden = hidden_paths(ctx, session)
    # Where the command finds the state dir: its real path, in the worktree or not.
    state = session.worktree / hidden[0] if hidden else ctx.state_dir
    common = _linked_common(session)
    placement = inplace.Placement(
        session.worktree,
        Path(live.mountpoint),
        read_only,
        state,
        writable=() if own_state is None else (own_state,),
        common=common,
        session_dir=spec.session_dir,
    )
    child_env = {**env, **session_env(ctx, session, live.mountpoint, env)}
    with conn:
        os.set_inheritable(conn.fileno(), True)
        try:
            proc = inplace.spawn(argv, placement, cwd=cwd, env=child_env, pass_fds=(conn.fileno(),))
        except FileNotFoundError:
            raise GitsessError(f"command not found: {argv[0]}", exit_code=127) from None
        except PermissionError:
            raise GitsessError(f"permission denied: {argv[0]}", exit_code=126) from None
        # Like a shell: the terminal's ^C and ^\ go to the command, which decides. A SIGTERM
        # or SIGHUP sent to gitsess itself is passed on: the command ends, and so the run.
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
        for forwarded in (signal.SIGTERM, signal.SIGHUP):
            previous[forwarded] = signal.signal(
                forwarded, lambda signum, _frame: proc.send_signal(signum)
            )
        try:
            code = proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return RunResult(128 - code if code < 0 else code)


def _linked_common(session: Session) -> Path | None:
    """A linked worktree's real common dir by its real path (the one git names the main
    worktree after), None for a main worktree."""
    from gitsess.overlay import gitdir

    dirs = gitdir.linked_dirs(os.fsencode(session.worktree))
    return None if dirs is None else Path(os.path.realpath(os.fsdecode(dirs[1])))


def keep_mounted(
    ctx: RepoContext,
    session: Session,
    *,
    mountpoint: Path | None,
    allow_other: bool,
    read_only: bool,
    force: bool = False,
) -> protocol.DaemonStatus:
    """`gitsess mount`: a mount that stays until `gitsess umount`; read-only when asked or
    when the session is. A mount point given must be a directory already.

    A mount hides what its directory held: a directory with files is refused unless `force`.
    A session mounts in one place: asked for another while mounted, it says where it is.
    """
    if mountpoint is not None and not mountpoint.is_dir():
        raise GitsessError(f"mount point {mountpoint} is not a directory (create it first)")
    if mountpoint is not None and _within_lower(ctx, session, mountpoint):
        # its daemon would read its own mount as the worktree under it, and hang
        raise GitsessError(
            f"{mountpoint} is in the worktree {session.worktree} that session {session.name}'s "
            "view is made of: the view would hold itself; choose a directory outside it"
        )
    if mountpoint is not None:
        current = mount.status(ctx.session_dir(session.id))
        if current is not None:
            if Path(current.mountpoint).resolve() != mountpoint.resolve():
                raise GitsessError(
                    f"session {session.name} is mounted at {current.mountpoint}, not at "
                    f"{mountpoint}; `gitsess umount {session.name}` first to mount it there"
                )
        elif not force and mountpoint.is_dir() and any(mountpoint.iterdir()):
            raise GitsessError(
                f"{mountpoint} is not empty: the mount would hide its files; choose an empty "
                f"directory, or pass {option('force')} to mount over them"
            )
    spec = spec_for(
        ctx,
        session,
        persistent=True,
        allow_other=allow_other,
        read_only=read_only or session.read_only,
        mountpoint=mountpoint,
    )
    return mount.ensure_mounted(spec)


def _within_lower(ctx: RepoContext, session: Session, mountpoint: Path) -> bool:
    """Whether `mountpoint` is the session's worktree or lies in it, outside its `.git` and
    the state dir (which the view does not show from the worktree)."""
    point, worktree = mountpoint.resolve(), session.worktree.resolve()
    if point != worktree and worktree not in point.parents:
        return False
    apart = (worktree / ".git", ctx.state_dir.resolve())
    return not any(point == d or d in point.parents for d in apart)


def mountpoint_of(ctx: RepoContext, session: Session) -> Path:
    return SessionHandle(ctx, session).mountpoint()


def unmount(ctx: RepoContext, session: Session) -> bool:
    return mount.stop(ctx.session_dir(session.id), mountpoint_of(ctx, session))


@dataclass(frozen=True)
class LiveSession:
    session: Session
    status: protocol.DaemonStatus


def live_sessions(ctx: RepoContext, sessions: Sequence[Session]) -> list[LiveSession]:
    out = []
    for s in sessions:
        st = mount.status(ctx.session_dir(s.id))
        if st is not None:
            out.append(LiveSession(s, st))
    return out


def drop_paths(
    ctx: RepoContext,
    session: Session,
    paths: Sequence[str],
    restamp: Sequence[str] = (),
    expect: Mapping[str, Stamp | None] | None = None,
) -> list[str]:
    """Take applied paths out of the delta, through the live daemon when there is one, and
    record the worktree's state anew for `restamp` paths (directories apply wrote into).
    `expect` gives paths' stamps as the apply read them: one the session wrote to
    since (checked where no write can come in between) stays, with the directories above it.
    Returns the paths kept so."""
    if not paths and not restamp:
        return []
    from gitsess.overlay.delta import DeltaStore
    from gitsess.overlay.tree import Tree

    session_dir = ctx.session_dir(session.id)
    with mount.locked(session_dir):
        try:
            try:
                reply = protocol.drop(str(ctx.session_dir(session.id)), paths, restamp, expect)
            except ConnectionError:
                # It was stopping and closed with our request unread: once it is gone (after
                # its last commit) delta.db is ours to write; a daemon started meanwhile is asked.
                reply = (
                    None
                    if mount.status(ctx.session_dir(session.id)) is None
                    else protocol.drop(str(ctx.session_dir(session.id)), paths, restamp, expect)
                )
        except protocol.Refused as e:
            raise GitsessError(f"the session daemon refused: {e}") from None
        if reply is not None:
            return [str(p) for p in reply.kept]
        store = DeltaStore(str(SessionHandle(ctx, session).delta))
        try:
            dropped = Tree(store, str(session.worktree), set()).drop_applied(
                [os.fsencode(p) for p in paths],
                [os.fsencode(p) for p in restamp],
                {os.fsencode(p): s for p, s in (expect or {}).items()},
            )
        finally:
            store.close()
        return [os.fsdecode(p) for p in dropped.kept]


def stray_daemons() -> list[Stray]:
    """Daemons of this user whose view is gone (`gitsess gc` ends them)."""
    return strays.find()


def stray_ender(ctx: RepoContext, stray: Stray) -> str:
    """What ends `stray`: `gc` here ends only this repository's (`gc.sweep_stray_daemons`),
    and a repository deleted with it has no `gc` to run."""
    state = Path(os.path.realpath(stray.delta)).parent.parent.parent
    if state == Path(os.path.realpath(ctx.state_dir)):
        return "`gitsess gc` ends it"
    if (state / "sessions").is_dir():
        return f"`gitsess gc` in {state.parent} ends it"
    return f"its repository is gone: `kill {stray.pid}` ends it"
