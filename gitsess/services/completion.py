"""What shell completion offers: the names a user types (sessions, archives, agent kinds, roles).

Each function returns the names starting with what was typed so far; a repository that cannot
be read completes nothing rather than failing inside the user's shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import apsw

from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext, discover
from gitsess.git.repo import GitError, remote_names
from gitsess.store.registry import Registry


def _starting(prefix: str, names: Iterable[str]) -> list[str]:
    return sorted({n for n in names if n.startswith(prefix)})


def _quietly(read: Callable[[RepoContext], Iterable[str]], prefix: str) -> list[str]:
    try:
        return _starting(prefix, read(discover()))
    except (GitsessError, OSError, apsw.Error, GitError):
        return []


def sessions(prefix: str) -> list[str]:
    def read(ctx: RepoContext) -> list[str]:
        with Registry.opened(ctx.registry_path, create=False) as registry:
            return [] if registry is None else [s.name for s in registry.all()]

    return _quietly(read, prefix)


def archives(prefix: str) -> list[str]:
    from gitsess.git.archive_commits import list_archives

    def read(ctx: RepoContext) -> list[str]:
        return [a.ref_name for a in list_archives(ctx.open())]

    return _quietly(read, prefix)


def remotes(prefix: str) -> list[str]:
    def read(ctx: RepoContext) -> list[str]:
        return remote_names(ctx.open())

    return _quietly(read, prefix)


def agent_kinds(prefix: str) -> list[str]:
    from gitsess.services.agents import profiles

    def read(ctx: RepoContext) -> list[str]:
        found = profiles.load(ctx, os.environ).by_kind
        return [*found, *(alias for p in found.values() for alias in p.aliases)]

    return _quietly(read, prefix)


def roles(prefix: str, session: str | None) -> list[str]:
    """The roles of `session` (a name, id or offset; None: $GITSESS_SESSION, else every
    session's)."""
    from gitsess.services import sessions as sessions_service
    from gitsess.services.agents import list_participants

    def read(ctx: RepoContext) -> list[str]:
        chosen = None
        if session is not None or os.environ.get(sessions_service.SESSION_ENV):
            chosen = sessions_service.resolve(ctx, session)
        return [i.participant.role for i in list_participants(ctx, chosen)]

    return _quietly(read, prefix)
