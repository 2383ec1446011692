"""git's own files in a session's log: hidden by default, folded into one line per git command.

One `git commit` writes a dozen files below `.git` (index.lock, HEAD.lock, logs/..., objects);
listed one by one they bury what the session's commands did to the worktree.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from gitsess.overlay.gitdir import in_git
from gitsess.services.timeline import Drift, Event

# What `log` and `watch` list: their changes, with git's own folded.
T = TypeVar("T", Event, Drift, Event | Drift)


def is_git(path: str) -> bool:
    return in_git(os.fsencode(path))


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


# git's options before its subcommand that take the next word (`git -c k=v commit`).
_TAKES_VALUE = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env"})


@dataclass(frozen=True)
class GitActivity:
    """The changes one git process made below `.git`, as one line."""

    first: Event  # its first change (in this batch): when, and who
    files: int  # distinct paths below `.git` it changed
    more: bool = False  # a later batch of a command already listed (`watch`)

    @property
    def key(self) -> tuple[int | None, str | None]:
        return (self.first.pid, self.first.cmdline)

    @property
    def time(self) -> datetime:
        return self.first.time

    @property
    def command(self) -> str:
        """The program and its subcommand: `git commit` of `git commit -q -m x`."""
        words = (self.first.cmdline or self.first.process or "git").split()
        name = words[0].rpartition("/")[2] if words else "git"
        rest = iter(words[1:])
        for word in rest:
            if word in _TAKES_VALUE:
                next(rest, None)
            elif not word.startswith("-"):
                return f"{name} {word}"
        return name


def fold(events: Iterable[T]) -> list[T | GitActivity]:
    """The events with those below `.git` folded: one `GitActivity` per process, where its
    first change below `.git` was."""
    return Folder().fold(events)


class Folder:
    """Folds batch after batch (`watch`): a git command is one item per batch, marked `more`
    after its first (a live view adds it to the line it has, a piped one says "more")."""

    def __init__(self) -> None:
        self._seen: set[tuple[int | None, str | None]] = set()

    def fold(self, events: Iterable[T]) -> list[T | GitActivity]:
        out: list[T | GitActivity] = []
        where: dict[tuple[int | None, str | None], int] = {}
        paths: dict[int, set[str]] = {}
        for e in events:
            if not isinstance(e, Event) or not is_git(e.path):
                out.append(e)
                continue
            key = (e.pid, e.cmdline)
            if key not in where:
                where[key] = len(out)
                out.append(GitActivity(e, 0, more=key in self._seen))
                self._seen.add(key)
            paths.setdefault(where[key], set()).add(e.path)
        for index, found in paths.items():
            item = out[index]
            assert isinstance(item, GitActivity)
            out[index] = GitActivity(item.first, len(found), item.more)
        return out
