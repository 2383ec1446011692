"""`gitsess tour`: the main commands, run for real on a demo repository in a temporary directory.

The tour is a list of steps so each feature adds its own. Each step runs gitsess in a child
process, as a user would, with the per-user index kept in the temporary directory too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gitsess.git.repo import STATE_DIR_ENV, Person
from gitsess.git.trees import init_with_commit
from gitsess.services.sessions import SESSION_ENV


@dataclass(frozen=True)
class Step:
    say: str  # what the step shows, in a sentence
    args: tuple[str, ...]  # gitsess's arguments; none: the step only says something


STEPS: tuple[Step, ...] = (
    Step(
        "A session bound to the worktree you are in, and to its branch:",
        ("new", "idea", "--title", "try a faster parser"),
    ),
    Step(
        "A session with a worktree of its own, on a new branch gitsess/side:",
        ("new", "side", "--worktree"),
    ),
    Step("Sessions are listed by worktree; -1 is the newest, -2 the one before:", ("ls",)),
    Step("Any command takes a name, an id, an id prefix or -N:", ("show", "-2")),
    Step("Rename and retitle:", ("rename", "idea", "parser")),
    Step("", ("title", "parser", "parse twice as fast")),
    Step(
        "Removing a session removes the worktree and branch gitsess made, unless they hold "
        "work found nowhere else:",
        ("rm", "side"),
    ),
    Step("Scripts read JSON:", ("ls", "--json")),
    Step("Work happens inside a session; the real worktree does not change:", ("new", "demo")),
    Step(
        "",
        (
            "run",
            "-s",
            "demo",
            "--",
            "sh",
            "-c",
            "printf 'def parse(text):\\n    return text.splitlines()\\n' > parser.py"
            ' && echo "Parsing notes" > NOTES.md',
        ),
    ),
    Step(
        "Every run starts with a checkpoint. A run that goes wrong (every writer counts, git"
        " included):",
        ("run", "-s", "demo", "--", "sh", "-c", "rm -rf tests parser.py && git add -A"),
    ),
    Step("", ("checkpoints", "demo")),
    Step(
        "is undone as a whole, files and git state; undo again would bring it back:",
        ("undo", "demo"),
    ),
    Step("What happened in it, process by process, grouped by run:", ("log", "demo")),
    Step("Its files, read without mounting it:", ("fs", "demo", "cat", "NOTES.md")),
    Step(
        "A key-value store for whoever works in it, inside or out:",
        ("kv", "demo", "set", "status", "parser done"),
    ),
    Step("", ("kv", "demo", "ls")),
    Step("What the session changed, content compared:", ("diff", "demo")),
    Step(
        "git inside a session is the session's own too: this commit moves no real branch",
        ("run", "-s", "demo", "--", "git", "commit", "-q", "-am", "Parse lines"),
    ),
    Step("The session is a commit ahead of its branch:", ("ls",)),
    Step(
        "A copy of the session to try something else in; dropping all of the copy's work"
        " (its commit too) leaves the original as it was:",
        ("fork", "demo", "other-idea"),
    ),
    Step("", ("discard", "other-idea", "--all", "-y")),
    Step(
        "Keep a session's view mounted for editors and tools (each `gitsess run` mounts it"
        " for its command):",
        ("mount", "demo"),
    ),
    Step("Mounted sessions and who is inside:", ("ps",)),
    Step(
        "From another terminal, `gitsess watch demo` shows its changes live as they happen"
        " (ctrl-c stops it).",
        (),
    ),
    Step("", ("umount", "demo")),
    Step(
        "Apply it to the branch (its commit, then the rest as a commit; the real worktree "
        "gets the files too); the session goes on, now empty:",
        ("apply", "demo", "--commit", "-m", "Notes"),
    ),
    Step(
        "Two sessions (two agents, say) change the same file:",
        ("run", "-s", "left", "--", "sh", "-c", "echo 'left wins' >> README.md"),
    ),
    Step("", ("run", "-s", "right", "--", "sh", "-c", "echo 'right wins' >> README.md")),
    Step(
        "The conflict radar sees it before anyone applies (merged in memory, nothing written):",
        ("overlaps",),
    ),
    Step("ls marks them too:", ("ls",)),
    Step(
        "A gated apply runs the test on the result first (the branch's tip with the session's "
        "work) and moves the branch only if it passes; it names whom the branch now conflicts "
        "with:",
        ("apply", "left", "--commit", "-m", "Left wins", "--test", "grep -q 'left wins' README.md"),
    ),
    Step(
        "Agents get all of this as MCP tools: `gitsess run --agent KIND` registers `gitsess mcp`"
        " with the agent (--no-mcp leaves it out); by hand: claude mcp add gitsess -- gitsess mcp",
        ("mcp", "--help"),
    ),
)

DEMO_FILES = {
    "README.md": "# demo\n\nA small project for the gitsess tour.\n",
    "parser.py": "def parse(text):\n    return text.split()\n",
    "tests/test_parser.py": "from parser import parse\n\n\ndef test_parse():\n"
    "    assert parse('a b') == ['a', 'b']\n",
}


def make_demo_repo(path: Path) -> Path:
    """A repository at `path` with one commit on `main`, and an identity to commit with."""
    init_with_commit(
        path, Person("gitsess tour", "tour@gitsess.invalid"), DEMO_FILES, "Initial commit"
    )
    return path


@dataclass(frozen=True)
class TourEvent:
    """What the tour shows next: `say` a line of text, a `command` about to run (its argv after
    `gitsess`), or that the step `failed` (`code` its exit code)."""

    kind: Literal["say", "command", "failed"]
    text: str = ""
    args: tuple[str, ...] = ()
    code: int = 0


def run(show: Callable[[TourEvent], None]) -> int:
    """Run every step; the exit code of the first failing one, else 0."""
    with tempfile.TemporaryDirectory(prefix="gitsess-tour-") as tmp:
        demo = make_demo_repo(Path(tmp) / "demo")
        env = {k: v for k, v in os.environ.items() if k not in (SESSION_ENV, STATE_DIR_ENV)}
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        show(TourEvent("say", f"A demo repository with one commit: {demo}"))
        for step in STEPS:
            if step.say:
                show(TourEvent("say", f"\n{step.say}"))
            if not step.args:
                continue
            show(TourEvent("command", args=step.args))
            sys.stdout.flush()
            done = subprocess.run([sys.executable, "-m", "gitsess", *step.args], cwd=demo, env=env)
            if done.returncode != 0:
                show(TourEvent("failed", code=done.returncode))
                return done.returncode
        show(TourEvent("say", "\nThat is the tour. The demo repository is removed now."))
    return 0
