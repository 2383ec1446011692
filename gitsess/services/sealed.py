"""Whether this process runs inside a session's run, where the state dir is bound read-only
(`runtime/inplace.py`): gitsess there reads its state, and writes only through the daemon.
Imported by every command line: the standard library only."""

from __future__ import annotations

import os
from collections.abc import Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from gitsess.git.repo import RepoContext

# What works inside a run: commands that only read the state, `kv`, `checkpoint`, `undo` and
# `rewind` (whose writes go through the daemon: the run's session is mounted), the git hooks
# (which do nothing inside a session), and the MCP server, whose tools answer each as the
# command would.
INSIDE = frozenset(
    {"agents", "archives", "checkpoint", "checkpoints", "completion", "doctor", "fs", "hook",
     "kv", "log", "ls", "mcp", "ps", "rewind", "show", "tour", "undo", "watch"}
)  # fmt: skip


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def inside_run(ctx: RepoContext) -> bool:
    return _read_only(str(ctx.state_dir))


def refusal(args: list[str], env: Mapping[str, str]) -> str | None:
    """Why the command `args` cannot run here (inside a run, a command that writes the state),
    or None."""
    command = next((a for a in args if not a.startswith("-")), None)
    state = env.get("GITSESS_DIR")
    if command is None or command in INSIDE or not state or not _read_only(state):
        return None
    return (
        f"`gitsess {command}` cannot run inside a session's run: the state dir is read-only "
        "there; run it outside the session"
    )
