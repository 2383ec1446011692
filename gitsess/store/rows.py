"""The rows of the registry's runs and synced states, as `Registry` returns them (its
participants: `agent_rows.py`).

Apart from `registry.py`, which loads them when it makes one: `ls` and `kv get` read sessions
only (`show` reads runs too), and each of these classes took a share of their start.
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
class Synced:
    """One row of the `synced` table: the session commit last pushed or pulled, and the
    session's own state (base, and its work as a tree) right after."""

    remote: str  # the remote's name or URL, as given
    commit: str
    tree: str
    base: str
    synced_at: datetime
