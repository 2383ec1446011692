"""`gitsess doctor --repair`: a registry rebuilt from the session dirs, so that nothing a
damaged or lost `sessions.db` forgot is lost with it.

A session dir holds the session's changes (delta.db, data files); its name and binding lived in
the registry only. A session dir no row owns comes back as `recovered-<id prefix>`, bound to
the worktree the command runs in, at its HEAD: its changes can then be diffed, applied or
archived.

First the registry itself: one SQLite cannot read is set aside (`sessions.db.damaged-<time>`),
and the sessions come back in a new one; in one it can, text that is not UTF-8 is mended in
place (`Registry.mend_text`), since every command reading such a row fails on it. `doctor`
without `--repair` finds both (`Registry.problems`, which runs SQLite's `quick_check` too). A
session dir holds changes when its delta.db has a name or a key-value, or cannot be read
(`holds_changes`): `gc` never deletes one.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import apsw

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.overlay import layout
from gitsess.overlay.delta import DeltaStore
from gitsess.services import sessions
from gitsess.store.registry import Registry


@dataclass(frozen=True)
class Repaired:
    moved_aside: Path | None  # the unreadable registry, kept under this name
    recovered: tuple[str, ...]  # names of the sessions made again from their dirs
    mended: int = 0  # text values that were not UTF-8, mended in place


def holds_changes(session_dir: Path) -> bool:
    """Whether a session dir holds anything of the session's (unreadable counts as yes)."""
    delta = layout.delta(session_dir)
    if not delta.exists():
        return False
    try:
        store = DeltaStore(str(delta), readonly=True)
    except apsw.Error:
        return True
    try:
        return store.holds_changes()
    except apsw.Error:
        return True
    finally:
        store.close()


def repair(ctx: RepoContext) -> Repaired:
    moved = _set_aside_if_unreadable(ctx.registry_path)
    mended = 0 if moved is not None else _mend_text(ctx.registry_path)
    if not ctx.sessions_dir.is_dir():
        return Repaired(moved, (), mended)
    known = {s.session.id for s in sessions.list_sessions(ctx)}
    recovered = []
    for directory in sorted(ctx.sessions_dir.iterdir()):
        if directory.name in known or not _is_session_dir(directory):
            continue
        if not holds_changes(directory):
            continue  # gc removes it
        made = sessions.create(
            ctx,
            f"recovered-{directory.name[:8]}",
            session_id=directory.name,
            title="recovered by gitsess doctor --repair",
        )
        recovered.append(made.name)
    return Repaired(moved, tuple(recovered), mended)


def _set_aside_if_unreadable(path: Path) -> Path | None:
    if not path.exists():
        return None
    try:
        with Registry.opened(path, create=False) as registry:
            if registry is None or not [p for p in registry.problems() if "UTF-8" not in p]:
                return None
    except GitsessError:
        pass
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, Path(f"{aside}{suffix}"))
    return aside


def _mend_text(path: Path) -> int:
    with Registry.opened(path, create=False) as registry:
        return 0 if registry is None else registry.mend_text()


def is_session_id(name: str) -> bool:
    """Whether a name in `sessions/` is a session's id (its dir's name)."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def _is_session_dir(path: Path) -> bool:
    return is_session_id(path.name) and path.is_dir() and not path.is_symlink()
