"""Session commits: a session as published on a remote, under `refs/gitsess/sessions/<name>`.

The commit's first parent is the session's base and its tree is the base's tree with the
session's git-visible changes (built like an archive's), so `git show`, `git diff REF^ REF`
and `git log` work on it. Its second parent, when there is one, is the session commit it
follows (the one the remote had, or the one last pushed or pulled here): successive pushes form
a line, a new push is a fast-forward of the remote ref, and "has the remote moved past what I
last saw" is a question of ancestry.

Metadata are `Gitsess-*:` trailers, as in archives: session id, name, title, branch, creation
time, the audit summary (events per operation, number of runs) and, with `--with-kv`, where
the key-value store lies in the tree (`KV_PATH`). Nothing else about the machine is written:
no worktree path, no command lines, no file names from the log.

With `--with-kv` the key-value store is a file of the tree at `KV_PATH` (refused when the
session has its own `.gitsess` there), marked by its trailer: a pull takes it into the kv store
and never into the view, and a commit without the trailer holds such a file as the session's
own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pygit2
from pygit2.enums import ObjectType

from gitsess.errors import GitsessError
from gitsess.git.archive_commits import ArchivedPath, changed_paths
from gitsess.git.changes import GIT_FILE
from gitsess.git.objects import edit_tree, signature

PREFIX = "refs/gitsess/sessions/"
# The key-value store's place in a session commit's tree. A commit carries it only when its
# `Gitsess-Kv` trailer says so; otherwise a file of that name is the session's like any other.
KV_PATH = ".gitsess/kv.json"
_TRAILER = "Gitsess-"


@dataclass(frozen=True)
class Published:
    """A session commit, read back."""

    commit: str
    base: str
    previous: str | None  # the session commit this one follows
    session_id: str
    name: str
    title: str
    branch: str | None
    created_at: str
    ops: dict[str, int]  # audit events per operation, where the push was made
    runs: int
    kv: bool  # the tree carries the key-value store at KV_PATH
    pushed_at: datetime
    author: str
    head: str | None = None  # the commits made inside the session end here (its last parent)


def ref_for(name: str) -> str:
    return PREFIX + name


def tree_with_kv(repo: pygit2.Repository, tree: str, kv: Mapping[str, Any]) -> str:
    """`tree` (the session's work, its objects in `repo`) with the key-value store added at
    `KV_PATH`, as a JSON object."""
    top = KV_PATH.partition("/")[0]
    obj = repo.get(tree)
    assert isinstance(obj, pygit2.Tree)
    if top in obj:
        raise GitsessError(
            f"the session has its own {top}, where --with-kv would put the key-value store; "
            "push without --with-kv"
        )
    blob = repo.create_blob(json.dumps(dict(kv), indent=1, sort_keys=True).encode() + b"\n")
    return edit_tree(repo, tree, {KV_PATH: (str(blob), GIT_FILE)})


def make_commit(
    repo: pygit2.Repository,
    tree: str,
    *,
    base: str,
    previous: str | None,
    fields: Mapping[str, str | None],
    ops: Mapping[str, int],
    runs: int,
    kv: bool,
    head: str | None = None,
) -> str:
    """Write a session commit (no ref) of `tree` (from `tree_with_kv` when `kv`). `fields`:
    session_id, name, title, branch, created_at. `head`: the last of the commits made inside
    the session, a last parent (so a push carries them) named by a trailer."""
    ids = [base] + ([previous] if previous else []) + ([head] if head else [])
    parents = [pygit2.Oid(hex=i) for i in ids]
    author = signature(repo, "AUTHOR")
    committer = signature(repo, "COMMITTER")
    message = _message(fields, ops, runs, kv, head)
    oid = repo.create_commit(None, author, committer, message, pygit2.Oid(hex=tree), parents)
    return str(oid)


def commit_tree_id(repo: pygit2.Repository, oid: str) -> str:
    return str(_commit(repo, oid).tree_id)


def _commit(repo: pygit2.Repository, oid: str) -> pygit2.Commit:
    obj = repo.get(oid)
    if obj is None or obj.type != ObjectType.COMMIT:
        raise GitsessError(f"{oid} is not a commit in this repository")
    return obj.peel(pygit2.Commit)


_FIELDS = {
    "Session": "session_id",
    "Name": "name",
    "Title": "title",
    "Branch": "branch",
    "Created": "created_at",
}


def _message(
    fields: Mapping[str, str | None],
    ops: Mapping[str, int],
    runs: int,
    kv: bool,
    head: str | None = None,
) -> str:
    name = fields.get("name") or ""
    title = fields.get("title") or ""
    events = sum(ops.values())
    by_op = ", ".join(f"{op} {n}" for op, n in sorted(ops.items()))
    lines = [
        f"gitsess session {name}" + (f": {title}" if title else ""),
        "",
        f"Audit: {runs} run(s), {events} file event(s)" + (f" ({by_op})" if by_op else "") + ".",
        "",
    ]
    for label, attr in _FIELDS.items():
        value = fields.get(attr)
        if value:
            # a trailer is one line: a title with newlines would end the block early
            lines.append(f"{_TRAILER}{label}: {' '.join(value.splitlines())}")
    if ops:
        lines.append(f"{_TRAILER}Ops: " + " ".join(f"{op}={n}" for op, n in sorted(ops.items())))
    lines.append(f"{_TRAILER}Runs: {runs}")
    if kv:
        lines.append(f"{_TRAILER}Kv: {KV_PATH}")
    if head:
        lines.append(f"{_TRAILER}Head: {head}")
    return "\n".join(lines) + "\n"


def read(repo: pygit2.Repository, oid: str) -> Published:
    """The session commit `oid`; an error if it is not one (or is not here)."""
    obj = _commit(repo, oid)
    values: dict[str, str] = {}
    for line in obj.message.splitlines():
        label, sep, value = line.partition(": ")
        if sep and label.startswith(_TRAILER):
            values[label[len(_TRAILER) :]] = value
    if "Session" not in values or "Name" not in values or not obj.parent_ids:
        raise GitsessError(f"{oid} is not a gitsess session commit")
    ops: dict[str, int] = {}
    for item in values.get("Ops", "").split():
        op, _, n = item.partition("=")
        if n.isdigit():
            ops[op] = int(n)
    branch = values.get("Branch")
    if branch is not None and not _valid_branch(branch):
        raise GitsessError(f"{oid[:10]} names no valid branch ({branch!r}); not taken")
    runs = values.get("Runs", "0")
    parents = [str(p) for p in obj.parent_ids]
    # a trailer alone is no head: only the last parent it names is (a message may say anything)
    head = values.get("Head") if len(parents) > 1 and parents[-1] == values.get("Head") else None
    if head is not None:
        parents.pop()
    return Published(
        commit=str(obj.id),
        base=parents[0],
        previous=parents[1] if len(parents) > 1 else None,
        session_id=values["Session"],
        name=values["Name"],
        title=values.get("Title", ""),
        branch=branch,
        created_at=values.get("Created", ""),
        ops=ops,
        runs=int(runs) if runs.isdigit() else 0,
        kv=values.get("Kv") == KV_PATH,
        pushed_at=datetime.fromtimestamp(obj.committer.time, UTC),
        author=obj.author.name,
        head=head,
    )


def _valid_branch(name: str) -> bool:
    """A short branch name, as `refs/heads/<name>` takes it (`refs/heads/main` would become
    `refs/heads/refs/heads/main`)."""
    return not name.startswith("refs/") and pygit2.reference_is_valid_name("refs/heads/" + name)


def content_paths(repo: pygit2.Repository, published: Published) -> list[ArchivedPath]:
    """What the session changed against its base, path by path (the key-value store is not
    one of the session's files)."""
    paths = changed_paths(repo, published.base, published.commit)
    return [p for p in paths if not (published.kv and p.path == KV_PATH)]


def content_tree(repo: pygit2.Repository, published: Published) -> str:
    """The commit's tree without the key-value store: the session's work as a tree."""
    tree = commit_tree_id(repo, published.commit)
    return edit_tree(repo, tree, {KV_PATH: None}) if published.kv else tree


def kv_items(repo: pygit2.Repository, published: Published) -> dict[str, Any]:
    """The key-value store the commit carries (empty when it carries none)."""
    if not published.kv:
        return {}
    try:
        blob = _commit(repo, published.commit).tree[KV_PATH]
    except KeyError:
        return {}
    try:
        data = json.loads(repo[blob.id].read_raw())
    except ValueError:  # not JSON, not UTF-8
        data = None
    if not isinstance(data, dict):
        raise GitsessError(f"{published.commit}: {KV_PATH} is not a JSON object")
    return data


def descends(repo: pygit2.Repository, commit: str, ancestor: str) -> bool:
    """Whether `commit` is `ancestor` or has it in its history (both must be here; a missing
    `ancestor` is not in the history of a commit that is)."""
    if commit == ancestor:
        return True
    if ancestor not in repo or commit not in repo:
        return False
    return bool(repo.descendant_of(commit, ancestor))
