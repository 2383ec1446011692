"""Sharing sessions through git remotes: push, pull, and the sessions a remote carries.

A push is an archive pushed to a ref: the session's work as a session commit (see
`git.published`) under `refs/gitsess/sessions/<name>` on the remote. A pull fetches that ref
and lays the commit's changes against its base into a session here, as `restore` does with an
archive. Each side remembers, per session, the session commit it last pushed or pulled and the
state it left the session in (`synced` in the registry): a pull fast-forwards only when the
remote's commit descends from that one and the session has not changed since; otherwise the two
have diverged, and only `--force` goes on (a push keeps the remote's commit in the line of
history; a pull archives the local work first).

What leaves the machine is the commit's objects: the session's tracked and
untracked-not-ignored files, and counts from its audit log. Agent homes and credentials live in
the state dir, which no view shows, and the key-value store goes only with `with_kv`.

The recorded state is the session's own tree (`archives.snapshot`), not the commit's: the same
delta over another worktree gives another tree, and comparing snapshots keeps an unchanged
session from looking diverged. Fetches take objects only, no local refs. A commit no push made
is refused whole before anything is made (`_verify`): a path git's `verify_path` refuses, an
entry that is no file or symlink, a key-value store that is not a JSON object of strings. A
pull refuses a session with participants inside. It is not atomic: a pull killed half-way
leaves the sync record as it was, so the next pull needs `--force`, which archives first.
`_standing` says how a remote session stands to the local one, for `pull` and `ls --remote`
alike, so a listing never says `behind` where pull says diverged.

A push whose remote commit holds this state already (tree, base, title, branch) pushes nothing.
A pull that takes the remote's state discards the session's git-visible changes (not ignored
files: build output stays), lays the commit's and moves the base to the commit's; the keys the
commit carries are set, others stay (they may be ones that never leave this machine). A
session is named by its ref, never by its `Gitsess-Name` trailer, which is only flagged when it
says otherwise.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Literal

from gitsess.errors import GitsessError, option
from gitsess.git import published, transport
from gitsess.git.archive_commits import refused_in_tree
from gitsess.git.published import Published
from gitsess.git.repo import (
    RepoContext,
    Repository,
    has_branch,
    head_of,
    open_worktree,
    remote_names,
)
from gitsess.git.transport import Progress as Progress  # the cli shows its counts
from gitsess.git.trees import commit_tree_id
from gitsess.git.worktree import (
    BRANCH_PREFIX,
    Binding,
    WorktreeSpec,
    checked_out_at,
    remove_created,
)
from gitsess.runtime import mount
from gitsess.services import archives, discard, fork, kv, sessions
from gitsess.services.sessions import runs
from gitsess.services.timeline import DeltaReader, delta_path
from gitsess.store.registry import Registry, Session
from gitsess.store.rows import Run, Synced


def is_remote(ctx: RepoContext, word: str) -> bool:
    """Whether `word` names a remote of the repository, or is a URL."""
    return word in remote_names(ctx.open()) or transport.is_url(word)


def _registry(ctx: RepoContext) -> AbstractContextManager[Registry | None]:
    return Registry.opened(ctx.registry_path, create=False)


def _synced(ctx: RepoContext, session: Session) -> Synced | None:
    with _registry(ctx) as registry:
        return None if registry is None else registry.synced(session.id)


def _record(
    ctx: RepoContext, session: Session, remote: str, commit: str, snap: archives.Snapshot
) -> None:
    """Remember the session commit now shared, and the session's state it corresponds to."""
    base = snap.session.base_commit
    assert base is not None
    with _registry(ctx) as registry:
        assert registry is not None
        registry.set_synced(session.id, remote=remote, commit=commit, tree=snap.tree, base=base)


# ---------------------------------------------------------------------------------------------
# push


@dataclass(frozen=True)
class Pushed:
    session: Session
    remote: str
    ref: str
    commit: str  # the session commit the remote has now
    pushed: bool  # False: the remote had this state already
    files: int  # git-visible changes the commit carries
    kv: bool
    forced: bool  # the remote had work never pulled here (it stays in the commit's history)
    notes: tuple[str, ...] = ()


def push(
    ctx: RepoContext,
    ref: str | None,
    remote: str | None = None,
    *,
    with_kv: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> Pushed:
    """Publish the session as a session commit under `refs/gitsess/sessions/<name>` on the
    remote. Refused when the remote's commit is not one this side pushed or pulled (or an
    ancestor of it), unless `force`."""
    session = sessions.resolve(ctx, ref)
    _base(session)
    repo = ctx.open()
    target = transport.open_remote(repo, remote, branch=session.branch)
    name = published.ref_for(session.name)
    theirs = transport.fetch(target, [name], progress=progress).get(name)
    synced = _synced(ctx, session)
    known = theirs is None or (
        synced is not None and published.descends(repo, synced.commit, theirs)
    )
    if not known and not force:
        raise GitsessError(
            f"{target.label} has session {session.name} at {theirs[:10] if theirs else ''} "
            f"with work never pulled here: `gitsess pull {session.name} {target.label}` first, "
            "or push --force (their commit stays in the session commit's history)"
        )
    snap = archives.snapshot(ctx, session, keep=True)
    session = snap.session
    base = _base(session)  # (an interrupted apply completed by the snapshot moves it)
    tree = snap.tree
    if with_kv:
        tree = published.tree_with_kv(repo, tree, {i.key: i.value for i in kv.items(ctx, session)})
    ops, session_runs = _audit(ctx, session)
    title = _shared_title(session, session_runs[0] if session_runs else None)
    if theirs is not None and _same(repo, theirs, tree, session, title, snap.head):
        _record(ctx, session, target.label, theirs, snap)
        return Pushed(session, target.label, name, theirs, False, snap.changes, with_kv,
                      False, snap.notes)  # fmt: skip
    previous = theirs
    if previous is None and synced is not None and synced.commit in repo:
        previous = synced.commit  # the line goes on, on this remote too
    commit = published.make_commit(
        repo, tree, base=base, previous=previous, ops=ops, runs=len(session_runs), kv=with_kv,
        head=snap.head,
        fields={
            "session_id": session.id, "name": session.name, "title": title,
            "branch": session.branch, "created_at": session.created_at.isoformat(),
        },
    )  # fmt: skip
    # not a forced update: with `theirs` as a parent this is a fast-forward, and a push that
    # raced ours to the remote makes the remote refuse it
    transport.push(target, [f"{commit}:{name}"], progress=progress)
    _record(ctx, session, target.label, commit, snap)
    return Pushed(session, target.label, name, commit, True, snap.changes, with_kv, not known,
                  snap.notes)  # fmt: skip


def _base(session: Session) -> str:
    if session.base_commit is None:
        raise GitsessError(
            f"session {session.name} has no base commit (its branch had none when it began); "
            "commit on the branch first"
        )
    return session.base_commit


def _same(
    repo: Repository,
    theirs: str,
    tree: str,
    session: Session,
    title: str,
    head: str | None,
) -> bool:
    """Whether the remote's commit already holds this state of the session."""
    try:
        there = published.read(repo, theirs)
    except GitsessError:
        return False
    return (
        published.commit_tree_id(repo, theirs) == tree
        and there.base == session.base_commit
        and (there.title, there.branch, there.head) == (title, session.branch, head)
    )


def _audit(ctx: RepoContext, session: Session) -> tuple[dict[str, int], list[Run]]:
    """Events per operation, and the runs. Only counts are pushed: command lines and the
    log's paths stay here (a command line may hold a token)."""
    mount.sync(ctx.session_dir(session.id))
    with DeltaReader(delta_path(ctx, session)) as reader:
        ops = reader.op_counts()
    return ops, runs(ctx, session)


def _shared_title(session: Session, first: Run | None) -> str:
    """The session's title, unless `run` made it from the first command line (as
    `sessions.start_run` does): that one may hold a token, so it stays here."""
    if first is not None and session.title == " ".join(first.command)[:200]:
        return ""
    return session.title


# ---------------------------------------------------------------------------------------------
# pull


Outcome = Literal["created", "fast-forward", "replaced", "up-to-date", "same"]


@dataclass(frozen=True)
class Pulled:
    session: Session
    remote: str
    commit: str
    # created: a new session; fast-forward: the session had not changed since it was last
    # synced, and took the remote's state; replaced: it had diverged, --force took the remote's
    # state (the local work archived first); up-to-date: the remote has nothing newer; same:
    # both hold the same state already
    outcome: Outcome
    files: int  # paths the session commit changed against its base
    kv: int  # keys taken from the commit
    archive: str | None = None  # where --force kept the local work
    notes: tuple[str, ...] = ()


def pull(
    ctx: RepoContext,
    name: str,
    remote: str | None = None,
    *,
    worktree: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> Pulled:
    """Bring the remote's session `name` here: a new session bound to a worktree of its
    branch (with `worktree`, one is created when none has it checked out), or an update of the
    local session of that name (fast-forward; diverged only with `force`)."""
    sessions.validate_name(name)
    with _registry(ctx) as registry:
        local = None if registry is None else registry.by_name(name)
    repo = ctx.open()
    target = transport.open_remote(repo, remote, branch=local.branch if local else None)
    ref = published.ref_for(name)
    theirs = transport.fetch(target, [ref], progress=progress).get(ref)
    if theirs is None:
        raise GitsessError(
            f"{target.label} has no session {name} (`gitsess ls --remote {target.label}`)"
        )
    there = published.read(repo, theirs)
    _verify(repo, there, f"{target.label}'s session {name} ({theirs[:10]})")
    if local is None:
        done = _pull_new(ctx, repo, target.label, name, there, worktree)
    else:
        done = _pull_into(ctx, repo, target.label, local, there, force)
    if there.name != name:
        claim = f"the commit of {ref} calls itself session {there.name!r}; it is {name} here"
        done = replace(done, notes=(*done.notes, claim))
    return done


def _verify(repo: Repository, there: Published, what: str) -> None:
    """Refuse, before anything is made, a session commit that no push made: paths no session
    holds (`archives.check_paths`), in its changes or in the commits made inside it (whose
    tree becomes the session's index), or a key-value store that is not one."""
    archives.check_paths(published.content_paths(repo, there), what)
    if there.head is not None:
        tree = commit_tree_id(repo, there.head)
        archives.check_refused(refused_in_tree(repo, tree), what)
    for key, value in published.kv_items(repo, there).items():
        kv.check_item(key, value)


def _pull_new(
    ctx: RepoContext,
    repo: Repository,
    remote: str,
    name: str,
    there: Published,
    worktree: bool,
) -> Pulled:
    branch = there.branch
    holder = checked_out_at(repo, branch) if branch else None
    # A new id, not the pushed one: ids name machine-wide things (the daemon's socket), and
    # both sides may well be clones on one machine.
    if holder is not None:
        # bound like `new` run in that worktree
        session = sessions.create(replace(ctx, worktree=holder), name, title=there.title)
    elif worktree:
        wanted = branch or BRANCH_PREFIX + name
        exists = has_branch(repo, wanted)
        spec = WorktreeSpec(wanted, None if exists else there.base)
        session = sessions.create(ctx, name, title=there.title, worktree=spec)
    else:
        what = f"branch {branch}" if branch else "its detached HEAD"
        raise GitsessError(
            f"no worktree has {what} checked out for session {name}; "
            f"pass {option('worktree')} to create one"
        )
    try:
        session = _set_base(ctx, session, there.base)
        notes = _base_note(session, there)
        files, keys = _lay(ctx, repo, session, there)
        _record(ctx, session, remote, there.commit, archives.snapshot(ctx, session, keep=False))
    except BaseException:
        fork.undo(ctx, session)
        if session.created_worktree:
            remove_created(ctx, _binding(session))
        raise
    return Pulled(session, remote, there.commit, "created", files, keys, notes=notes)


def _pull_into(
    ctx: RepoContext,
    repo: Repository,
    remote: str,
    session: Session,
    there: Published,
    force: bool,
) -> Pulled:
    status = mount.status(ctx.session_dir(session.id))
    if status is not None and status.participants:
        pids = ", ".join(str(p.get("pid")) for p in status.participants)
        raise GitsessError(
            f"session {session.name} is in use (pid {pids}); pull replaces its files, so "
            "leave it first"
        )
    synced = _synced(ctx, session)
    standing = _standing(ctx, repo, session, synced, there.commit)
    if standing.snap is None:
        return Pulled(session, remote, there.commit, "up-to-date", 0, 0)
    snap = standing.snap
    session = snap.session
    if standing.relation == "same":
        keys = _take_kv(ctx, repo, session, there)
        _record(ctx, session, remote, there.commit, snap)
        return Pulled(session, remote, there.commit, "same", 0, keys, notes=snap.notes)
    archived = None
    if standing.relation == "diverged":
        if not force:
            raise GitsessError(_diverged(session, remote, standing.changed, standing.behind))
        archived = archives.archive(ctx, session).ref if snap.changes else None
    plan, notes = discard.plan_discard(ctx, session, include_ignored=False)
    discarded = discard.discard(ctx, session, plan)
    if discarded.kept:
        # written to while we pulled (a `gitsess mount` user): laying the remote's files over
        # them would lose that work; --force archives it first
        raise GitsessError(
            f"session {session.name} was written to during the pull ({', '.join(discarded.kept)})"
            "; pull --force takes the remote's state, archiving the session's first"
        )
    session = _set_base(ctx, session, there.base)
    files, keys = _lay(ctx, repo, session, there)
    _record(ctx, session, remote, there.commit, archives.snapshot(ctx, session, keep=False))
    notes = [*snap.notes, *notes, *discarded.notes, *_base_note(session, there)]
    if there.branch != session.branch:
        notes.append(
            f"the session was pushed from branch {there.branch or '(detached)'}; here it stays "
            f"on {session.branch or 'a detached HEAD'}"
        )
    outcome: Outcome = "replaced" if standing.relation == "diverged" else "fast-forward"
    return Pulled(session, remote, there.commit, outcome, files, keys, archived, tuple(notes))


def _diverged(session: Session, remote: str, changed: bool, behind: bool) -> str:
    why = []
    if changed:
        why.append("it has changes here that were never pushed")
    if not behind:
        why.append(f"{remote}'s commit does not follow the one last pushed or pulled here")
    return (
        f"session {session.name} has diverged from {remote}'s ({' and '.join(why)}): pull "
        "--force takes theirs (yours is archived first), push --force makes yours the remote's "
        "(theirs stays in its history)"
    )


def _set_base(ctx: RepoContext, session: Session, base: str) -> Session:
    with _registry(ctx) as registry:
        assert registry is not None
        return registry.update(session.id, base_commit=base)


def _base_note(session: Session, there: Published) -> tuple[str, ...]:
    head = head_of(open_worktree(session.worktree)).commit
    if head == there.base:
        return ()
    return (
        f"the session began at {there.base[:10]}, but {session.worktree} has "
        f"{(head or 'no commit')[:10]} checked out: its changes lie over that",
    )


def _lay(ctx: RepoContext, repo: Repository, session: Session, there: Published) -> tuple[int, int]:
    """Write the commit's changes into the session's view, and its key-value store."""
    from gitsess.services import session_git

    paths = published.content_paths(repo, there)
    archives.lay_paths(ctx, session, repo, paths)
    if there.head is not None and session.branch is not None:
        # the commits made inside the session come along: its branch ends at them again
        files = session_git.files_for_head(repo, session, there.head)
        archives.lay_git_files(ctx, session, files)
    return len(paths), _take_kv(ctx, repo, session, there)


def _take_kv(ctx: RepoContext, repo: Repository, session: Session, there: Published) -> int:
    """The commit's keys are set here; keys it does not carry are left alone (they may be
    ones that never leave this machine)."""
    items = published.kv_items(repo, there)
    for key, value in items.items():
        kv.put(ctx, session, key, value)
    return len(items)


def _binding(session: Session) -> Binding:
    return Binding(session.worktree, session.branch, session.base_commit,
                   session.created_worktree, session.created_branch)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# ls --remote


# "-": no session of that name here; "unsynced": one that was never pushed or pulled, and has
# no changes (a pull takes theirs); "synced": the commit last pushed or pulled here; "behind": a
# newer one, and the session has not changed since (a pull fast-forwards); "ahead": an older one
# (something newer was pushed from here since); "same": another commit, with the state the
# session has; "diverged": the session changed since and the remote's commit is newer, or that
# commit does not follow the one last pushed or pulled (a pull needs --force)
Relation = Literal["-", "unsynced", "synced", "behind", "ahead", "same", "diverged"]


@dataclass(frozen=True)
class Standing:
    """How a local session stands to a remote's commit: `pull` acts on it, `ls --remote`
    shows it, computed by one function (`_standing`) for both."""

    relation: Relation
    snap: archives.Snapshot | None = None  # the session's state, when it had to be read
    changed: bool = False  # the session changed since it was last synced
    behind: bool = False  # the remote's commit follows the one last synced


def _standing(
    ctx: RepoContext, repo: Repository, local: Session, synced: Synced | None, oid: str
) -> Standing:
    if synced is not None and published.descends(repo, synced.commit, oid):
        return Standing("synced" if synced.commit == oid else "ahead")
    there = published.read(repo, oid)
    snap = archives.snapshot(ctx, local, keep=False)
    state = (snap.tree, snap.session.base_commit)
    if state == (published.content_tree(repo, there), there.base):
        return Standing("same", snap)
    changed = snap.changes > 0 if synced is None else state != (synced.tree, synced.base)
    behind = synced is None or published.descends(repo, oid, synced.commit)
    if changed or not behind:
        return Standing("diverged", snap, changed, behind)
    return Standing("unsynced" if synced is None else "behind", snap, changed, behind)


@dataclass(frozen=True)
class RemoteSession:
    name: str  # from the ref: what `pull NAME` takes
    published: Published
    files: int
    here: Relation
    # the commit's own `Gitsess-Name` trailer, when it names another session than the ref
    # (a commit pushed under another name by hand, or crafted): shown, never used
    claims: str | None = None


def list_remote(
    ctx: RepoContext, remote: str | None = None, *, progress: Progress | None = None
) -> tuple[str, list[RemoteSession]]:
    """The sessions `remote` carries, by name (their commits are fetched to read them)."""
    repo = ctx.open()
    target = transport.open_remote(repo, remote)
    refs = transport.list_refs(target, published.PREFIX)
    heads = transport.fetch(target, sorted(refs), progress=progress) if refs else {}
    found: list[tuple[str, Published, int, Session | None, Synced | None]] = []
    with _registry(ctx) as registry:
        for ref, oid in sorted(heads.items()):
            if not ref.startswith(published.PREFIX) or oid not in repo:
                continue  # created while we fetched: the next listing shows it
            try:
                there = published.read(repo, oid)
            except GitsessError:
                continue  # not a session commit: someone else's ref in our namespace
            name = ref.removeprefix(published.PREFIX)
            files = len(published.content_paths(repo, there))
            local = None if registry is None else registry.by_name(name)
            synced = None if registry is None or local is None else registry.synced(local.id)
            found.append((name, there, files, local, synced))
    # (the registry is closed: reading a session's state takes it again)
    listed = []
    for name, there, files, local, synced in found:
        here = "-" if local is None else _standing(ctx, repo, local, synced, there.commit).relation
        claims = there.name if there.name != name else None
        listed.append(RemoteSession(name, there, files, here, claims))
    return target.label, listed
