"""Where a gated apply's test output is kept, and the end of it that `gitsess log` shows under
a failed test's run. The standard library only: `log` imports it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gitsess.git.location import RepoContext

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gitsess.store.rows import Run

ROLE = "test"  # a gated apply's test runs under this role in the session's runs
SHOWN_LINES = 20
SHOWN_BYTES = 4096


def log_path(ctx: RepoContext, session_id: str, run_id: int) -> Path:
    return ctx.session_dir(session_id) / "tests" / f"{run_id}.log"


@dataclass(frozen=True)
class Tail:
    text: str  # the last lines, at most SHOWN_LINES of them and SHOWN_BYTES
    cut: bool  # whether there was more before them
    path: Path  # the whole output


def failed_tail(ctx: RepoContext, session_id: str, run: Run | None) -> Tail | None:
    """The end of the output of `run` when it is a test that failed; None for any other run,
    or when nothing was kept."""
    if run is None or run.role != ROLE or run.exit_code in (0, None):
        return None
    path = log_path(ctx, session_id, run.id)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - SHOWN_BYTES))
            data = f.read()
    except OSError:
        return None
    lines = data.decode(errors="replace").splitlines()
    cut = size > len(data)
    if cut and lines:
        lines = lines[1:]  # (began mid-line)
    if len(lines) > SHOWN_LINES:
        lines, cut = lines[-SHOWN_LINES:], True
    return Tail("\n".join(lines), cut, path)
