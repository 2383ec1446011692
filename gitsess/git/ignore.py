"""Git's ignore rules as a session sees them: .gitignore files, info/exclude, core.excludesFile."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pygit2

from gitsess.git.repo import common_dir
from gitsess.git.view import Entry, SessionView
from gitsess.git.wildmatch import wildmatch_regex


def join_path(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def parent_path(path: str) -> str:
    return path.rpartition("/")[0]


@dataclass(frozen=True)
class IgnoreRule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    basename: bool  # no slash in the pattern: it matches a name at any depth
    base: str  # directory of the file it came from ("" for the root and the global files)

    def matches(self, path: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.base and not path.startswith(self.base + "/"):
            return False
        rel = path[len(self.base) + 1 :] if self.base else path
        subject = rel.rpartition("/")[2] if self.basename else rel
        return self.regex.fullmatch(subject) is not None


def parse_ignore(text: str, base: str = "") -> list[IgnoreRule]:
    """The rules of one .gitignore-format file whose directory is `base`."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        rule = _parse_ignore_line(raw, base)
        if rule is not None:
            rules.append(rule)
    return rules


def _parse_ignore_line(raw: str, base: str) -> IgnoreRule | None:
    line = _strip_trailing_spaces(raw)
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate or line.startswith(("\\!", "\\#")):
        line = line[1:]  # "!" negates; a backslash makes a leading "!" or "#" literal
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    basename = "/" not in line
    line = line.lstrip("/")
    regex = re.compile(wildmatch_regex(line), re.DOTALL)
    return IgnoreRule(regex, negate, dir_only, basename, base)


def _strip_trailing_spaces(line: str) -> str:
    # trailing spaces end the pattern unless escaped with a backslash
    end = len(line)
    while end > 0 and line[end - 1] == " " and not (end > 1 and line[end - 2] == "\\"):
        end -= 1
    return line[:end]


class Tracked(Protocol):
    def holds(self, path: str, is_dir: bool) -> bool:
        """Whether git tracks `path` as a file (`is_dir` False) or a directory."""
        ...


class Ignore:
    """Git's ignore rules as the session sees them: the view's .gitignore files, then the
    repository's info/exclude and core.excludesFile. Tracked paths are never ignored."""

    def __init__(
        self,
        view: SessionView,
        repo: pygit2.Repository,
        tracked: Tracked | None = None,
    ) -> None:
        self.view = view
        self.global_rules = _global_rules(repo)
        self._tracked = tracked
        self._per_dir: dict[str, list[IgnoreRule]] = {}
        self._in_force: dict[str, list[IgnoreRule]] = {}
        self._dir_ignored: dict[str, bool] = {}

    def ignored(self, path: str, is_dir: bool) -> bool:
        if self._tracked is not None and self._tracked.holds(path, is_dir):
            return False
        parent = parent_path(path)
        if parent and self._dir_is_ignored(parent):
            return True
        return self._decide(path, is_dir)

    def _dir_is_ignored(self, path: str) -> bool:
        # a directory that is ignored hides all below it: nothing inside can be re-included
        cached = self._dir_ignored.get(path)
        if cached is None:
            parent = parent_path(path)
            cached = (bool(parent) and self._dir_is_ignored(parent)) or self._decide(path, True)
            self._dir_ignored[path] = cached
        return cached

    def _decide(self, path: str, is_dir: bool) -> bool:
        for rule in reversed(self._rules_for(parent_path(path))):
            if rule.matches(path, is_dir):
                return not rule.negate
        return False

    def _rules_for(self, directory: str) -> list[IgnoreRule]:
        """Rules in force in `directory`, lowest precedence first."""
        rules = self._in_force.get(directory)
        if rules is None:
            outer = self._rules_for(parent_path(directory)) if directory else self.global_rules
            rules = outer + self._dir_rules(directory)
            self._in_force[directory] = rules
        return rules

    def _dir_rules(self, directory: str) -> list[IgnoreRule]:
        rules = self._per_dir.get(directory)
        if rules is None:
            name = join_path(directory, ".gitignore")
            entry = self.view.entry(name)
            # git does not follow a .gitignore that is a symlink
            text = self.view.read(name).decode("utf-8", "replace") if _is_file(entry) else ""
            rules = parse_ignore(text, directory)
            self._per_dir[directory] = rules
        return rules


def _is_file(entry: Entry | None) -> bool:
    return entry is not None and entry.kind == "file"


def _global_rules(repo: pygit2.Repository) -> list[IgnoreRule]:
    """core.excludesFile, then info/exclude (which takes precedence)."""
    rules: list[IgnoreRule] = []
    for path in (_excludes_file(repo), common_dir(repo) / "info" / "exclude"):
        if path is not None and path.is_file():
            rules.extend(parse_ignore(path.read_text("utf-8", "replace")))
    return rules


def _excludes_file(repo: pygit2.Repository) -> Path | None:
    try:
        configured = repo.config["core.excludesFile"]
    except KeyError:
        configured = None
    if isinstance(configured, str) and configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path("~/.config").expanduser()) / "git" / "ignore"
