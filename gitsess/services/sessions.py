"""Session services: create, resolve, list, rename, retitle, remove.

Each function takes the RepoContext of the invocation and returns dataclasses; rendering is the
CLI's job. Sessions are addressed by a *ref*, resolved in order: `-N` (the N-th most recently
created, by `seq`, not by last use, so an offset does not shift as sessions are used; `-0` and
past the end are errors; never creates), an exact name, a full id, a hex id prefix of 4+
characters (an error listing the candidates if several match; shorter ones are names only, so a
run cannot land in an unrelated session), else unknown (or, with `create_missing`, created; a
concurrent creator of the same name wins). No ref means `$GITSESS_SESSION`.

Names are `[A-Za-z0-9][A-Za-z0-9._-]{0,63}` that make a valid branch `gitsess/<name>` and are
no UUID (a UUID is always an id). Without one, `new` picks a free adjective-noun pair, also
avoiding a worktree or branch of that name (`worktree.name_in_use`: `rm` may have kept them,
and `--worktree` would collide). `remove` deletes the row and the session dir in one
transaction (if the directory cannot go, the row stays), stopping a mounted daemon first and
refusing while participants are inside; unapplied work is archived first (`archives.archive`),
and the worktree and branch go only if gitsess made them. `check_bound` (before `run` mounts)
compares the branch checked out in the worktree with the session's, not the `state` column, so
it holds without hooks; `--rebind` takes the branch checked out now, its HEAD the new base.

The services that only some commands use import their heavy modules (the overlay, apply, the
agents, git's tracking and archive code) where they need them: every command is a process of
its own, and `new` and `mount` should not pay for what `ls` or `rm` use.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from gitsess.errors import GitsessError, option
from gitsess.git.location import RepoContext, discover, read_ref
from gitsess.services.handle import SessionHandle
from gitsess.store.db import private_dir
from gitsess.store.registry import NameTaken, Registry, Session
from gitsess.store.user_index import UserIndex, index_path
from gitsess.suggest import did_you_mean

if TYPE_CHECKING:
    from gitsess.git.binding import Binding, WorktreeSpec
    from gitsess.overlay.usage import Bytes
    from gitsess.store.rows import Run

__all__ = [
    "SESSION_ENV",
    "NoSuchSession",
    "Removal",
    "RepoContext",
    "RepoSessions",
    "Session",
    "SessionInfo",
    "WorktreeSpec",  # (for annotations: its module loads with `new`, see `worktree_spec`)
    "check_bound",
    "close_names",
    "create",
    "discover",
    "info",
    "list_everywhere",
    "list_sessions",
    "registry_problems",
    "remove",
    "rename",
    "resolve",
    "set_title",
    "touch",
    "validate_name",
    "worktree_spec",
]

SESSION_ENV = "GITSESS_SESSION"
# What a run gives its command beside the name (`services/live.py`): the id, which a rename of
# the session during the run does not change.
SESSION_ID_ENV = "GITSESS_SESSION_ID"

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_OFFSET = re.compile(r"-([0-9]+)")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Shorter prefixes would too easily shadow a name the user meant to create.
_ID_PREFIX = re.compile(r"[0-9a-f][0-9a-f-]{3,35}")

# fmt: off
_ADJECTIVES = (
    "amber", "brave", "calm", "deft", "eager", "fair", "gentle", "happy", "ivory", "jolly",
    "keen", "lively", "merry", "nimble", "proud", "quick", "quiet", "rapid", "sharp", "shy",
    "steady", "swift", "tidy", "vivid", "warm", "wise", "witty", "zesty",
)
_NOUNS = (
    "badger", "beaver", "bison", "crane", "dingo", "eagle", "falcon", "ferret", "gecko", "heron",
    "ibis", "jackal", "koala", "lemur", "lynx", "marten", "newt", "otter", "panda", "puffin",
    "quail", "raven", "seal", "stoat", "tapir", "viper", "walrus", "yak",
)
# fmt: on


@dataclass(frozen=True)
class SessionInfo:
    """A session as listed or shown."""

    session: Session
    offset: int  # -1 for the newest session
    here: bool  # bound to the worktree the command runs in
    session_dir: Path
    worktree_exists: bool
    changed_files: int | None  # None until the overlay reports it
    commits: int | None = None  # commits of the session's own that its branch lacks
    damaged: bool = False  # its delta.db cannot be read (see `remove`'s force)
    status: str = "idle"  # running (someone inside), mounted, idle, damaged
    behind: int | None = None  # commits the branch gained since the session's base
    head_branch: str | None = None  # the session's HEAD's branch, when not the session's
    below_base: int = 0  # the session's HEAD was reset this many commits below its base
    # Bytes of its delta by kind: live files, checkpoints, audit log, free pages.
    bytes_by_kind: Bytes | None = None
    # Inside a run of its worktree its real worktree and branch cannot be read: changed_files,
    # commits and behind are None then (unknown), never a count against the view.
    out_of_reach: bool = False


# Named tuples, not frozen dataclasses: every command that resolves a session loads this
# module, and a dataclass's generated functions cost each of them a share of its start.
class RepoSessions(NamedTuple):
    """The sessions of one repository, for `ls --everywhere`."""

    common_dir: Path
    sessions: list[SessionInfo]
    error: str | None = None  # the registry could not be read


class Removal(NamedTuple):
    session: Session
    removed_worktree: bool
    removed_branch: bool
    notes: list[str]  # what was kept, and why
    archive: str | None = None  # the ref keeping the session's unapplied changes


def validate_name(name: str) -> str:
    if _UUID.fullmatch(name.lower()):
        raise GitsessError(f"{name!r} is a session id, not a name")
    if not _NAME.fullmatch(name) or ".." in name or name.endswith((".", ".lock")):
        raise GitsessError(
            f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting "
            "with a letter or digit, without '..' and not ending in '.' or '.lock'"
        )
    return name


def worktree_spec(branch: str | None, from_rev: str | None) -> WorktreeSpec:
    """What `--worktree [BRANCH]` and `--from REV` ask for (its module loads with `new`'s)."""
    from gitsess.git.binding import WorktreeSpec

    return WorktreeSpec(branch, from_rev)


def _registry(ctx: RepoContext, *, create: bool) -> AbstractContextManager[Registry | None]:
    return Registry.opened(ctx.registry_path, create=create)


@contextmanager
def _existing_registry(ctx: RepoContext) -> Iterator[Registry]:
    with _registry(ctx, create=False) as registry:
        if registry is None:
            raise GitsessError(
                f"no sessions yet in {ctx.common_dir}; create one with `gitsess new`"
            )
        yield registry


def create(
    ctx: RepoContext,
    name: str | None = None,
    *,
    session_id: str | None = None,
    title: str = "",
    worktree: WorktreeSpec | None = None,
    read_only: bool = False,
) -> Session:
    """A new session bound to the current worktree, or to a new one when `worktree` is given.

    A `name` that is a UUID is taken as the id. Without a name, a free `adjective-noun` name is
    picked. Raises when the name or id is taken.
    """
    if name is not None and session_id is None and _UUID.fullmatch(name.lower()):
        name, session_id = None, name
    if name is not None:
        validate_name(name)
    if session_id is not None:
        session_id = _parse_id(session_id)
    from gitsess.git.binding import NameInUse, WorktreeSpec
    from gitsess.git.worktree import bind_current, create_worktree, remove_created

    # Fails outside a worktree before anything is written.
    current = bind_current(ctx) if worktree is None else None
    with _registry(ctx, create=True) as registry:
        assert registry is not None
        if name is not None and registry.by_name(name) is not None:
            raise NameTaken(f"a session named {name!r} already exists")
        UserIndex(index_path()).add(ctx.state_dir, ctx.common_dir)
        # Auto-picked names can collide with a concurrent `new`; pick again then.
        for _ in range(8):
            chosen = name or _free_name(ctx, registry.names())
            try:
                binding = current or create_worktree(ctx, chosen, worktree or WorktreeSpec())
            except NameInUse:
                if name is not None:
                    raise
                continue
            try:
                return _insert(ctx, registry, chosen, session_id, title, binding, read_only)
            except BaseException as e:
                if binding.created_worktree:
                    remove_created(ctx, binding)
                id_taken = session_id is not None and registry.by_id(session_id) is not None
                if not isinstance(e, NameTaken) or name is not None or id_taken:
                    raise
    raise GitsessError("could not pick a free session name; give one")


def _insert(
    ctx: RepoContext,
    registry: Registry,
    name: str,
    session_id: str | None,
    title: str,
    binding: Binding,
    read_only: bool,
) -> Session:
    with registry.write():
        session = registry.insert(
            id=session_id or str(uuid.uuid4()),
            name=name,
            title=title,
            worktree=binding.worktree,
            branch=binding.branch,
            base_commit=binding.base_commit,
            read_only=read_only,
            parent=None,
            created_worktree=binding.created_worktree,
            created_branch=binding.created_branch,
        )
        # Inside the transaction: if the directory cannot be made, the row is not kept either.
        try:
            private_dir(ctx.session_dir(session.id))
        except OSError as e:
            raise GitsessError(f"cannot create {ctx.session_dir(session.id)}: {e.strerror}") from e
    return session


def _free_name(ctx: RepoContext, taken: set[str]) -> str:
    import random

    from gitsess.git.worktree import name_in_use

    rng = random.SystemRandom()
    for attempt in range(256):
        name = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
        # When the word pairs run out, a number makes the space unbounded.
        if attempt >= 64:
            name += f"-{rng.randrange(10_000)}"
        if name not in taken and not name_in_use(ctx, name):
            return name
    raise GitsessError("could not pick a free session name; give one")


def _parse_id(text: str) -> str:
    lowered = text.lower()
    if not _UUID.fullmatch(lowered):
        raise GitsessError(f"invalid session id {text!r}: expected a UUID")
    return lowered


def resolve(
    ctx: RepoContext,
    ref: str | None,
    create_missing: bool = False,
    *,
    worktree: WorktreeSpec | None = None,
    env: Mapping[str, str] | None = None,
) -> Session:
    """The session `ref` names; None means `$GITSESS_SESSION` (set inside a session).

    With `create_missing`, a name or full id that names no session creates it (bound as
    `create` would, with `worktree`), so a supervisor can pick ids ahead and reuse them.
    Offsets and id prefixes never create.
    """
    if not create_missing:
        with _registry(ctx, create=False) as registry:
            return _find(ctx, registry, ref, env)
    return resolve_or_create(ctx, ref, worktree=worktree, env=env)[0]


def resolve_or_create(
    ctx: RepoContext,
    ref: str | None,
    *,
    worktree: WorktreeSpec | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[Session, bool]:
    """`resolve` with `create_missing`, and whether it created the session."""
    named = _ref(ref, env)
    with _registry(ctx, create=False) as registry:
        found = _lookup_ref(registry, ref, env)
    if found is not None:
        return found, False
    try:
        return create(ctx, named, worktree=worktree), True
    except NameTaken:
        # Another process created it between our lookup and our insert: use theirs.
        return resolve(ctx, named, env=env), False


def registry_problems(ctx: RepoContext) -> list[str]:
    """What a full read of the registry finds wrong (none when there is no registry)."""
    with _registry(ctx, create=False) as registry:
        return [] if registry is None else registry.problems()


class NoSuchSession(GitsessError):
    """A reference that names no session (the registry itself was read)."""


def _ref(ref: str | None, env: Mapping[str, str] | None) -> str:
    env = os.environ if env is None else env
    ref = ref or env.get(SESSION_ENV)
    if not ref:
        raise GitsessError(
            "no session given: name one (NAME, ID, ID prefix or -N), or run inside a session"
        )
    return ref


def _from_env(registry: Registry | None, env: Mapping[str, str] | None) -> Session | None:
    """The session `$GITSESS_SESSION` names; inside a run of a session renamed since, the name
    the run was given names none, and the run's `$GITSESS_SESSION_ID` gives it."""
    env = os.environ if env is None else env
    found = _lookup(registry, env.get(SESSION_ENV) or "")
    if found is None and env.get(SESSION_ID_ENV):
        found = _lookup(registry, env[SESSION_ID_ENV])
    return found


def _find(
    ctx: RepoContext,
    registry: Registry | None,
    ref: str | None,
    env: Mapping[str, str] | None = None,
) -> Session:
    """The session `ref` names, else (None) the one `$GITSESS_SESSION` does."""
    session = _lookup_ref(registry, ref, env)
    if session is None:
        raise _unknown(ctx, registry, _ref(ref, env))
    return session


def _lookup_ref(
    registry: Registry | None, ref: str | None, env: Mapping[str, str] | None
) -> Session | None:
    """The session `ref` names, else (None) the one the environment does (`_from_env`)."""
    return _lookup(registry, ref) if ref else _from_env(registry, env)


def _unknown(ctx: RepoContext, registry: Registry | None, ref: str) -> NoSuchSession:
    hint = did_you_mean(ref, set() if registry is None else registry.names())
    return NoSuchSession(f"no session {ref!r} in {ctx.common_dir}{hint}")


def close_names(ctx: RepoContext, name: str) -> str:
    """The "did you mean" hint for a session name about to be created (`run -s NAME`)."""
    with _registry(ctx, create=False) as registry:
        return "" if registry is None else did_you_mean(name, registry.names())


def _lookup(registry: Registry | None, ref: str) -> Session | None:
    """The session `ref` names, None if none; an offset past the end is an error."""
    offset = _OFFSET.fullmatch(ref)
    if offset:
        n = int(offset.group(1))
        if n == 0:
            raise GitsessError("-0 is not a session offset: -1 is the newest session")
        session = None if registry is None else registry.by_offset(n)
        if session is None:
            count = 0 if registry is None else registry.count()
            there = {0: "there are no sessions yet", 1: "there is only 1 session"}
            raise GitsessError(
                f"no session {ref}: {there.get(count, f'there are only {count} sessions')}"
            )
        return session
    if registry is None:
        return None
    session = registry.by_name(ref)
    if session is not None:
        return session
    lowered = ref.lower()
    if _UUID.fullmatch(lowered):
        return registry.by_id(lowered)
    if _ID_PREFIX.fullmatch(lowered):
        matches = registry.by_id_prefix(lowered)
        if len(matches) > 1:
            listed = ", ".join(f"{s.id} ({s.name})" for s in matches)
            raise GitsessError(f"session id prefix {ref!r} is ambiguous: {listed}")
        if matches:
            return matches[0]
    return None


def _infos(
    ctx: RepoContext,
    registry: Registry,
    env: Mapping[str, str] | None,
    *,
    only: str | None = None,
    sizes: bool = True,
) -> list[SessionInfo]:
    """Every session (or the one whose id is `only`), oldest first. `here` is relative to the
    session the command runs in, if any, else to the current worktree: inside a session the
    current directory is the overlay, not the worktree it is bound to. Without `sizes` nothing
    tells where the delta's bytes go (a session that did nothing is then not even opened)."""
    from gitsess.services.counts import Counts, counts

    env = os.environ if env is None else env
    here = ctx.worktree
    if env.get(SESSION_ENV):
        current = _from_env(registry, env)
        if current is not None:
            here = current.worktree
    sessions = registry.all()
    infos = []
    for i, s in enumerate(sessions):
        if only is not None and s.id != only:
            continue
        handle = SessionHandle(ctx, s)
        counted = counts(ctx, handle, sizes=sizes) if s.worktree.is_dir() else Counts(None, None)
        infos.append(
            SessionInfo(
                session=s,
                offset=i - len(sessions),
                here=s.worktree == here,
                session_dir=ctx.session_dir(s.id),
                worktree_exists=s.worktree.is_dir(),
                changed_files=counted.changed_files,
                commits=counted.commits,
                damaged=counted.damaged,
                status="damaged" if counted.damaged else _status(handle),
                behind=None if counted.out_of_reach else _behind(ctx, s),
                head_branch=counted.head_branch,
                below_base=counted.below_base,
                bytes_by_kind=counted.bytes_by_kind,
                out_of_reach=counted.out_of_reach,
            )
        )
    return infos


def apply_interrupted(ctx: RepoContext, session: Session) -> bool:
    """Whether an apply was killed half-way: `apply_journal.reconcile` must complete it first
    (importing the journal, and the git code it needs, costs more than starting a mount: it is
    needed only when the file exists)."""
    return SessionHandle(ctx, session).journal.exists()


def runs(ctx: RepoContext, session: Session) -> list[Run]:
    """The session's runs; one whose `gitsess run` is gone without ending it (killed) is ended
    now, so that it stops counting as running. (Not from inside a run: no outside process is
    visible there, and the registry is read-only.)"""
    from gitsess.services import sealed

    with _registry(ctx, create=False) as registry:
        if registry is None:
            return []
        found = registry.runs(session.id)
        if sealed.inside_run(ctx):
            return found
        lost = [r for r in found if r.ended_at is None and not _runner_alive(r)]
        for r in lost:
            registry.end_lost_run(r.id)
        return registry.runs(session.id) if lost else found


def _runner_alive(run: Run) -> bool:
    """Whether the process that started `run` still runs: its pid is taken by a process that
    started no later than the run did (a pid is reused once its process is gone)."""
    from gitsess import processes

    if run.pid is None:
        return False
    try:
        return processes.started_at(run.pid) <= run.started_at.timestamp() + 2
    except (OSError, StopIteration, ValueError, IndexError):
        return False


def _status(handle: SessionHandle) -> str:
    status = handle.status()
    if status is None:
        return "idle"
    return "running" if status.participants else "mounted"


def _behind(ctx: RepoContext, session: Session) -> int | None:
    """Commits the session's branch gained since its base; None when that cannot be told.
    The branch still at the base (the usual case) is read without loading pygit2."""
    if session.branch is None or session.base_commit is None:
        return None
    tip = read_ref(ctx.common_dir, "refs/heads/" + session.branch)
    if tip is None:
        return None
    if tip == session.base_commit:
        return 0
    from gitsess.git.repo import GitError, commits_behind

    try:
        return commits_behind(ctx.open(), session.base_commit, tip)
    except (GitError, KeyError, ValueError):
        return None


def list_sessions(
    ctx: RepoContext, env: Mapping[str, str] | None = None, *, sizes: bool = True
) -> list[SessionInfo]:
    """Every session of the repository, oldest first; `sizes`: see `_infos`."""
    with _registry(ctx, create=False) as registry:
        return [] if registry is None else _infos(ctx, registry, env, sizes=sizes)


def info(
    ctx: RepoContext, ref: str | None, env: Mapping[str, str] | None = None, *, sizes: bool = True
) -> SessionInfo:
    with _existing_registry(ctx) as registry:
        session = _find(ctx, registry, ref, env)
        return _infos(ctx, registry, env, only=session.id, sizes=sizes)[0]


def list_everywhere() -> list[RepoSessions]:
    """The sessions of every repository in the per-user index. Repositories that are gone leave
    the index; one with an unreadable registry is reported, not fatal."""
    index = UserIndex(index_path())
    found = []
    for state_dir, common_dir in index.repos():
        ctx = RepoContext(common_dir, state_dir, None)
        if not ctx.registry_path.exists():
            index.discard(state_dir)
            continue
        try:
            with _existing_registry(ctx) as registry:
                found.append(RepoSessions(common_dir, _infos(ctx, registry, {})))
        except GitsessError as e:
            found.append(RepoSessions(common_dir, [], str(e)))
    return [repo for repo in found if repo.sessions or repo.error]


def rename(ctx: RepoContext, ref: str | None, new_name: str) -> Session:
    """Give a session a new name. Its worktree and branch keep theirs: a branch may be shared."""
    validate_name(new_name)
    with _existing_registry(ctx) as registry:
        session = _find(ctx, registry, ref)
        if session.name == new_name:
            # `rename base -1` names the newest session (-1), not a new name: say so.
            raise GitsessError(f"session {session.name} is already named {new_name}")
        return registry.update(session.id, name=new_name)


def set_title(ctx: RepoContext, ref: str | None, title: str) -> Session:
    with _existing_registry(ctx) as registry:
        return registry.update(_find(ctx, registry, ref).id, title=title)


def touch(ctx: RepoContext, session: Session) -> Session:
    """Record that the session is being used now."""
    with _existing_registry(ctx) as registry:
        return registry.touch(session.id)


def check_bound(ctx: RepoContext, session: Session, *, rebind: bool = False) -> Session:
    """The session, if its worktree still has its branch checked out; with `rebind`, the session
    bound to whatever the worktree has checked out now.

    The view lays the session's changes over the worktree's files: over another branch's files
    they would mix two lines of work, and an apply would commit them to the session's branch.
    A branch being rebased or bisected counts as checked out. A missing worktree is left for
    the mount to report.
    """
    if session.branch is None or not session.worktree.is_dir():
        return session
    from gitsess.git.tracking import branch_gone, checked_out

    head = checked_out(session.worktree)
    if head.branch == session.branch:
        if session.state != "detached":
            return session
        with _existing_registry(ctx) as registry:
            return registry.update(session.id, state="active")
    if not rebind:
        now = f"branch {head.branch}" if head.branch else "a detached HEAD"
        if branch_gone(ctx.open(), session.branch):
            raise GitsessError(
                f"session {session.name} belongs to branch {session.branch}, which was deleted "
                f"({session.worktree} has {now} checked out); pass {option('rebind')} to move the "
                f"session onto {now}, or `gitsess rm {session.name}` (its changes are archived)"
            )
        raise GitsessError(
            f"session {session.name} belongs to branch {session.branch}, but its worktree "
            f"{session.worktree} has {now} checked out; check out {session.branch} again, or "
            f"pass {option('rebind')} to move the session onto {now}"
        )
    # The changes now lie over the files of the new HEAD: that commit is the session's base.
    with _existing_registry(ctx) as registry:
        return registry.update(
            session.id, branch=head.branch, base_commit=head.commit, state="active"
        )


def _unmount_for_removal(ctx: RepoContext, session: Session) -> None:
    """A mounted session is unmounted first; one with people inside is refused."""
    from gitsess.services import live

    status = SessionHandle(ctx, session).status()
    if status is not None and status.participants:
        pids = ", ".join(str(p.get("pid")) for p in status.participants)
        raise GitsessError(
            f"session {session.name} is in use (pid {pids}); leave it or `gitsess umount` it first"
        )
    live.unmount(ctx, session)


def start_run(
    ctx: RepoContext, session: Session, argv: list[str], cwd: Path, role: str | None
) -> int:
    """Record a run; a session without a title takes the first command's."""
    with _existing_registry(ctx) as registry:
        if not session.title:
            registry.update(session.id, title=" ".join(argv)[:200])
        return registry.start_run(session.id, argv, cwd, os.getpid(), role)


def end_run(ctx: RepoContext, run_id: int, exit_code: int) -> None:
    with _existing_registry(ctx) as registry:
        registry.end_run(run_id, exit_code)


def remove(ctx: RepoContext, ref: str | None, *, force: bool = False) -> Removal:
    """Delete a session: its row (with participants and runs) and its directory.

    A worktree and branch that gitsess created for it go too, unless they hold work found
    nowhere else (uncommitted changes, commits on no other branch); `force` removes them anyway.
    Unapplied changes are archived first (`Removal.archive`; `gitsess restore` takes them back).
    """
    from gitsess.git.archive_commits import PREFIX as ARCHIVE_PREFIX
    from gitsess.git.binding import Binding
    from gitsess.git.worktree import keep_detached, keep_reasons, remove_created
    from gitsess.overlay import objectdir
    from gitsess.overlay.view import DamagedDelta
    from gitsess.services import agents, archives

    with _existing_registry(ctx) as registry:
        session = _find(ctx, registry, ref)
        session_dir = ctx.session_dir(session.id)
        _unmount_for_removal(ctx, session)
        # Nothing is lost: unapplied changes are kept as a commit under an archive ref first.
        try:
            archived = archives.archive(ctx, session, force=force)
        except DamagedDelta:
            if not force:
                raise
            archived = archives.Archived(None, ("its delta.db was damaged: nothing archived",))
        binding = Binding(
            session.worktree,
            session.branch,
            session.base_commit,
            session.created_worktree,
            session.created_branch,
        )
        kept = keep_reasons(ctx, binding) if session.created_worktree and not force else []
        with registry.write():
            agents.purge_session(ctx, registry, session)
            registry.delete(session.id)
            # Inside the transaction, so a directory that cannot be removed keeps the row too.
            try:
                objectdir.remove_session_dir(session_dir)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise GitsessError(f"cannot remove {session_dir}: {e.strerror}") from e
        remaining = registry.count()
    notes = list(archived.notes)
    if archived.ref is not None:
        name = archived.ref.removeprefix(ARCHIVE_PREFIX)
        notes.append(
            f"unapplied changes archived as {archived.ref}; `gitsess restore {name}` brings "
            "the session back"
        )
    removed = False
    if session.created_worktree:
        if kept:
            notes.append(
                f"kept worktree {session.worktree} and branch {session.branch}: "
                + "; ".join(kept)
                + " (gitsess rm --force removes them)"
            )
        else:
            try:
                kept_head = keep_detached(ctx.open(), session.worktree)
                if kept_head is not None:
                    notes.append(
                        f"the worktree's detached HEAD held commits no ref reaches: kept as "
                        f"{kept_head}"
                    )
                remove_created(ctx, binding)
                removed = True
            except GitsessError as e:
                notes.append(str(e))
    if remaining == 0:
        try:
            UserIndex(index_path()).discard(ctx.state_dir)
        except GitsessError as e:
            notes.append(f"could not update the user index: {e}")
    return Removal(session, removed, removed and session.created_branch, notes, archived.ref)
