"""git's own files in a session's log: hidden by default, folded into one line per git command.

One `git commit` writes a dozen files below `.git` (index.lock, HEAD.lock, logs/..., objects);
listed one by one they bury what the session's commands did to the worktree.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gitsess.services.timeline import Event

GIT = ".git"


def is_git(path: str) -> bool:
    return path == GIT or path.startswith(GIT + "/")


def excluded(path: str, globs: Sequence[str]) -> bool:
    """Whether a glob matches the path or a directory above it."""
    parts = path.split("/")
    return any(
        fnmatch.fnmatchcase("/".join(parts[:n]), glob)
        for glob in globs
        for n in range(1, len(parts) + 1)
    )


def shown(path: str, *, git: bool, exclude: Sequence[str]) -> bool:
    """Whether `log`/`watch` list a change of `path` one by one."""
    return (git or not is_git(path)) and not excluded(path, exclude)


@dataclass(frozen=True)
class GitActivity:
    """The changes one git process made below `.git`, as one line."""

    first: Event  # its first change: when, and who
    files: int  # distinct paths below `.git` it changed

    @property
    def command(self) -> str:
        """The program and its subcommand: `git commit` of `git commit -q -m x`."""
        words = (self.first.cmdline or self.first.process or "git").split()
        name = words[0].rpartition("/")[2] if words else "git"
        sub = next((w for w in words[1:] if not w.startswith("-")), None)
        return f"{name} {sub}" if sub else name


def fold(events: Iterable[Event]) -> list[Event | GitActivity]:
    """The events with those below `.git` folded: one `GitActivity` per process, where its
    first change below `.git` was."""
    out: list[Event | GitActivity] = []
    where: dict[tuple[int | None, str | None], int] = {}
    paths: dict[int, set[str]] = {}
    for e in events:
        if not is_git(e.path):
            out.append(e)
            continue
        key = (e.pid, e.cmdline)
        if key not in where:
            where[key] = len(out)
            out.append(GitActivity(e, 0))
        paths.setdefault(where[key], set()).add(e.path)
    for index, found in paths.items():
        item = out[index]
        assert isinstance(item, GitActivity)
        out[index] = GitActivity(item.first, len(found))
    return out
