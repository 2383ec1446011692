"""The rows of the registry's other tables, as `Registry` returns them: runs, participants
(with their seeding records), synced states.

Apart from `registry.py`, which loads them when it makes one: `ls`, `show` and `kv get` read
sessions only, and each of these classes took a share of their start.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Run:
    """One row of the `runs` table: a command run inside a session."""

    id: int
    command: list[str]
    cwd: Path
    pid: int | None
    role: str | None
    started_at: datetime
    ended_at: datetime | None  # None while it runs (or when its runner died)
    exit_code: int | None


def run_of(row: tuple[Any, ...]) -> Run:
    id_, command, cwd, pid, role, started, ended, code = row
    return Run(
        id=id_,
        command=json.loads(command),
        cwd=Path(os.fsdecode(cwd)),  # (bytes: a path that is not UTF-8, see `registry._sql`)
        pid=pid,
        role=role,
        started_at=datetime.fromisoformat(started),
        ended_at=None if ended is None else datetime.fromisoformat(ended),
        exit_code=code,
    )


@dataclass(frozen=True)
class Seed:
    """One entry of a participant's seeding record: `path` in its root, the shared `target`."""

    path: str  # relative to the isolation root
    target: str  # the original the symlink points at
    status: str  # "linked", "missing" (no original) or "private" (the agent has its own file)


@dataclass(frozen=True)
class Participant:
    """One row of the `participants` table: an agent role working in a session."""

    id: int
    session_id: str
    role: str
    kind: str
    isolation_uuid: str
    root: Path
    lever: str  # JSON that the agents layer reads
    seeded: tuple[Seed, ...]
    pid: int | None  # the `gitsess run` holding the role, while or when last running
    state: str  # "idle" or "running"
    started_at: datetime | None
    ended_at: datetime | None


PARTICIPANT_COLUMNS = (
    "id, session_id, role, kind, isolation_uuid, root, lever, seeded, pid, state, started_at, "
    "ended_at"
)


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def participant_of(row: tuple[Any, ...]) -> Participant:
    (id_, session_id, role, kind, uuid, root, lever, seeded, pid, state, started, ended) = row
    return Participant(
        id=id_,
        session_id=session_id,
        role=role,
        kind=kind,
        isolation_uuid=uuid,
        root=Path(root),
        lever=lever,
        seeded=tuple(Seed(**s) for s in json.loads(seeded)),
        pid=pid,
        state=state,
        started_at=_time(started),
        ended_at=_time(ended),
    )


@dataclass(frozen=True)
class Synced:
    """One row of the `synced` table: the session commit last pushed or pulled, and the
    session's own state (base, and its work as a tree) right after."""

    remote: str  # the remote's name or URL, as given
    commit: str
    tree: str
    base: str
    synced_at: datetime
