"""`gitsess mcp`: the MCP server (stdio) that lets an agent drive gitsess itself.

Each tool is a thin call of the service its command calls, and answers with the JSON that
command's `--json` prints, under the same names (built by the same functions). An error is
the tool's error result carrying the one line the command would print; an unanticipated one
(a bug) is the SDK's "Error executing tool" with its traceback on stderr, never on the wire.
Started inside a session (`gitsess run`), every tool's `session` defaults to that session.
The SDK diverts fd 1 to stderr while serving, so nothing but the protocol reaches stdout, and
it runs synchronous tools in worker threads: a lock keeps to one call at a time, since the
services are written for one command per process.

`TOOLS` is the table the server is built from: a new tool is one function and one entry.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gitsess import __version__, errors
from gitsess.cli.base import json_text
from gitsess.cli.group import one_line
from gitsess.errors import GitsessError
from gitsess.services import sessions
from gitsess.services.sessions import RepoContext, Session, discover

RUN_TIMEOUT = 600.0  # seconds: the `run` tool's default limit
POLL_MAX = (2**31 - 1) / 1000  # seconds: the longest wait poll(2) takes
RUN_OUTPUT = 64 * 1024  # characters of a run's output returned (its end: where errors are)


def _target(session: str | None) -> tuple[RepoContext, Session]:
    ctx = discover()
    return ctx, sessions.resolve(ctx, session)


# ---------------------------------------------------------------------------------------------
# the tools


def sessions_tool() -> Any:
    """Every session of this repository, as `gitsess ls --json` lists them (with drift and the
    sessions each would conflict with)."""
    from gitsess.cli.session_cmds import clashes, ls_json

    ctx = discover()
    infos = sessions.list_sessions(ctx)
    return ls_json(infos, clashes(ctx, infos))


def show(session: str | None = None) -> Any:
    """One session, as `gitsess show --json` gives it. `session`: a name, an id (or a prefix
    of 4+ characters) or -N; default: the session this server runs in."""
    from gitsess.cli.session_cmds import show_json
    from gitsess.services import inspection

    ctx = discover()
    info = sessions.info(ctx, session)
    usage = inspection.usage(ctx, info)
    drift = inspection.drift(info.session, info.session_dir)
    commits = inspection.own_commits(ctx, info.session) if info.commits else []
    return show_json(info, usage, drift, commits)


def new(name: str | None = None, title: str = "") -> Any:
    """Create a session on this worktree (a generated name without `name`), as
    `gitsess new --json` gives it."""
    return asdict(sessions.create(discover(), name, title=title))


def diff(session: str | None = None, pathspecs: list[str] | None = None, stat: bool = False) -> Any:
    """What the session changed against its real worktree, as `gitsess diff --json` gives it:
    every file with its patch text, or with `stat` without the patches. `pathspecs` are git's,
    from the top of the worktree."""
    from gitsess.services import apply

    ctx, found = _target(session)
    result, notes = apply.diff(ctx, found, pathspecs or [])
    return {**result.to_json(with_patch=not stat), "notes": notes}


def log(
    session: str | None = None,
    since: str | None = None,
    path: str | None = None,
    ops: list[str] | None = None,
    run: int | None = None,
    git: bool = False,
) -> Any:
    """The session's file changes, oldest first, as `gitsess log --json` gives them (a list
    here). `since`: a time or a duration such as 10m; `path`: a glob; `ops`: create, write,
    rename, unlink, mkdir, ...; `run`: a run's id; `git`: also git's own files below .git."""
    from gitsess.cli.inspect_cmds import event_json
    from gitsess.services import gitfold, timeline

    flt = timeline.make_filter(since=since, path=path, ops=tuple(ops or ()), run_id=run)
    ctx, found = _target(session)
    past = timeline.timeline(ctx, found, flt)
    events = (
        e for g in past.groups for e in g.events if gitfold.shown(e.path, git=git, exclude=())
    )
    return [event_json(e) for e in sorted(events, key=_id)]


def _id(event: Any) -> int:
    return int(event.id)


def kv_get(key: str, session: str | None = None) -> Any:
    """KEY's value in the session's key-value store (`gitsess kv get KEY --json`)."""
    from gitsess.services import kv

    ctx, found = _target(session)
    return kv.get(ctx, found, key).value


def kv_set(key: str, value: Any, session: str | None = None) -> Any:
    """Set KEY to a JSON value in the session's key-value store (`gitsess kv set --json`)."""
    from gitsess.services import kv

    ctx, found = _target(session)
    kv.put(ctx, found, key, value)
    return {"key": key, "value": kv.get(ctx, found, key).value}


def apply(
    session: str | None = None,
    target: Literal["commit", "patch"] = "commit",
    pathspecs: list[str] | None = None,
    message: str | None = None,
    dry_run: bool = False,
    test: str | None = None,
    retries: int = 3,
    queue_timeout: float | None = None,
) -> Any:
    """Apply the session's changes, as `gitsess apply --json` reports it: `commit` on its
    branch (with `test`, a shell command run on the result first: the branch moves only if it
    exits 0; see `test` and `now_conflicts` in the answer; `queue_timeout`: the seconds to wait
    at most for the branch's turn behind other tested applies), or `patch` (its text under
    `patch`). On a conflict or a failed test nothing changes and `ok` is false."""
    from gitsess.services import apply as applying
    from gitsess.services import gate

    ctx, found = _target(session)
    text = message or found.title or f"Changes from gitsess session {found.name}"
    if target == "commit":
        return gate.commit(
            ctx, found, pathspecs or [], message=text, dry_run=dry_run, test=test,
            retries=retries, queue_timeout=queue_timeout,
        ).to_json()  # fmt: skip
    if test is not None:
        raise GitsessError("test only applies to a commit")
    outcome = applying.apply_to_patch(ctx, found, pathspecs or [], dry_run=dry_run)
    data = outcome.to_json()
    if outcome.patch is not None and not dry_run:
        data["patch"] = outcome.patch.text.decode(errors="replace")
    return data


def discard(paths: list[str], session: str | None = None) -> Any:
    """Drop the changes PATHS select (git pathspecs from the top; `:/` for all) from the
    session: what `gitsess discard -y --json PATHS` does and answers (what left the session,
    what was set back to the real worktree's state, what was written to meanwhile and kept)."""
    from gitsess.services import discard as discarding

    if not paths:
        raise GitsessError("discard needs paths (`:/` for all of the session's changes)")
    ctx, found = _target(session)
    plan, notes = discarding.plan_discard(ctx, found, paths)
    done = discarding.discard(ctx, found, plan) if plan.drop or plan.revert else None
    # (the keys of `discard --json`: its `discarded` was none of docs/json.md's)
    return {
        "name": found.name,
        "id": found.id,
        "dropped_commits": [],
        "dropped": [] if done is None else list(done.dropped),
        "reverted": [] if done is None else list(done.reverted),
        "kept": [] if done is None else list(done.kept),
        "notes": [*notes, *([] if done is None else done.notes)],
    }


def fork(new_name: str, session: str | None = None, at: int | None = None) -> Any:
    """A new session NEW_NAME with a copy of the session's changes, as they were at
    checkpoint `at` if given (`gitsess fork [--at CP] --json`)."""
    from gitsess.services import fork as forking

    ctx, found = _target(session)
    return asdict(forking.fork(ctx, found, new_name, at=at))


def overlaps() -> Any:
    """Paths two sessions (or a session and its branch's new commits) both changed, and
    whether applying both would conflict, as `gitsess overlaps --json` gives them."""
    from gitsess.services import overlaps as radar

    return [o.to_json() for o in radar.overlaps(discover())]


def run(command: list[str], session: str | None = None, timeout: float = RUN_TIMEOUT) -> Any:
    """Run COMMAND (a program and its arguments) inside the session, as `gitsess run -s
    SESSION -- COMMAND` does; answers its exit code and the end of its output (stdout and
    stderr together). After `timeout` seconds the command is killed (`timed_out`)."""
    if not command:
        raise GitsessError("run needs a command")
    if any("\0" in arg for arg in command):  # (no argv holds one: Popen raised ValueError)
        raise GitsessError("a command's arguments cannot hold a NUL character")
    if not timeout > 0:  # (NaN too)
        raise GitsessError("timeout must be positive")
    # poll(2) waits at most INT_MAX ms: a longer timeout is no limit (it overflowed the wait).
    limit = None if timeout >= POLL_MAX else timeout
    _, found = _target(session)
    argv = [sys.executable, "-m", "gitsess", "run", "-s", found.id, "--", *command]
    # Its own process group, so that a timeout ends everything the command started.
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    text = out.decode(errors="replace")
    return {
        "name": found.name,
        "command": command,
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "output": text[-RUN_OUTPUT:],
        "truncated": len(text) > RUN_OUTPUT,
    }


def checkpoint(message: str = "", session: str | None = None) -> Any:
    """Make a checkpoint of the session (mounted or not), as `gitsess checkpoint -m MESSAGE
    --json`; one is made even when nothing changed since the newest."""
    from gitsess.cli.checkpoint_cmds import made_json
    from gitsess.services import checkpoints

    ctx, found = _target(session)
    return made_json(checkpoints.checkpoint(ctx, found, message))


def checkpoints_tool(session: str | None = None) -> Any:
    """The session's checkpoints and its rewinds and undos, oldest first, as `gitsess
    checkpoints --json`."""
    from gitsess.cli.checkpoint_cmds import listing_json
    from gitsess.services import checkpoints

    ctx, found = _target(session)
    return listing_json(checkpoints.listing(ctx, found))


def undo(session: str | None = None, force: bool = False) -> Any:
    """Undo the session's last run (back to the checkpoint it started with), or its last
    rewind or undo, as `gitsess undo --json`; nothing is lost: an undo can be undone."""
    from gitsess.cli.checkpoint_cmds import rewind_json
    from gitsess.services import checkpoints

    ctx, found = _target(session)
    return rewind_json(checkpoints.undo(ctx, found, force=force))


def rewind(
    checkpoint: int, paths: list[str] | None = None, session: str | None = None, force: bool = False
) -> Any:
    """Bring the session (or only what PATHS select: git pathspecs from the worktree's top)
    back to CHECKPOINT, as `gitsess rewind --json`; `undo` brings back what it replaced."""
    from gitsess.cli.checkpoint_cmds import rewind_json
    from gitsess.services import checkpoints

    if paths == []:  # (as `rewind CP --` alone: an empty list must not rewind everything)
        raise GitsessError("paths is empty: give some, or leave it out to rewind the whole session")
    ctx, found = _target(session)
    specs = [p.strip("/") for p in paths or []]
    if specs:
        return rewind_json(checkpoints.rewind_paths(ctx, found, checkpoint, specs))
    return rewind_json(checkpoints.rewind(ctx, found, checkpoint, force=force))


# ---------------------------------------------------------------------------------------------
# the table, and the server built from it


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    read_only: bool  # changes nothing (MCP's readOnlyHint)


TOOLS: tuple[Tool, ...] = (
    Tool("sessions", sessions_tool, True),
    Tool("show", show, True),
    Tool("new", new, False),
    Tool("diff", diff, True),
    Tool("log", log, True),
    Tool("kv_get", kv_get, True),
    Tool("kv_set", kv_set, False),
    Tool("apply", apply, False),
    Tool("discard", discard, False),
    Tool("fork", fork, False),
    Tool("checkpoint", checkpoint, False),
    Tool("checkpoints", checkpoints_tool, True),
    Tool("undo", undo, False),
    Tool("rewind", rewind, False),
    Tool("overlaps", overlaps, True),
    Tool("run", run, False),
)

# One call at a time: the services are written for one command per process.
_CALLS = threading.Lock()


# The command each tool is a face of, where its name differs: inside a run, a tool is
# refused as its command would be (`services/sealed.py`).
_COMMAND = {"sessions": "ls", "kv_get": "kv", "kv_set": "kv"}


def _answering(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` answering JSON text, and an anticipated error as the tool's error result carrying
    the CLI's one-line message (a ToolError's would be prefixed by the SDK)."""
    from mcp.types import CallToolResult, TextContent

    from gitsess.services import sealed

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str | CallToolResult:
        with _CALLS, errors.tool_arguments():
            try:
                refused = sealed.refusal([_COMMAND.get(name, name)], os.environ)
                if refused is not None:
                    raise GitsessError(refused)
                return json_text(fn(*args, **kwargs))
            except Exception as e:
                message = one_line(e)
                if message is None:
                    raise
                text = " ".join(message.splitlines())
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    return call


def build() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    server = MCPServer(
        "gitsess",
        version=__version__,
        instructions="gitsess sessions: see your changes, land them (gated by tests), and see"
        " which other sessions you would conflict with before you apply.",
        log_level="WARNING",
    )
    for tool in TOOLS:
        server.add_tool(
            _answering(tool.name, tool.fn),
            name=tool.name,
            description=tool.fn.__doc__,
            annotations=ToolAnnotations(read_only_hint=tool.read_only),
            structured_output=False,
        )
    return server


def serve() -> None:
    """Serve on stdin/stdout until the client closes them."""
    build().run("stdio")
