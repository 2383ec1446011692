"""The rows of the registry's participants (agent roles in a session) with their seeding
records, as `Registry` returns them: apart from the sessions' (`registry.py`) and the runs'
(`rows.py`), which the small commands read, for the same reason as those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


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
