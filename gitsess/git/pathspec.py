"""Git's pathspecs: which paths a command selects (magic words, globs, prefixes)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from gitsess.errors import GitsessError
from gitsess.git.wildmatch import wildmatch_regex


def _is_within(path: str, top: str) -> bool:
    return top == "" or path == top or path.startswith(top + "/")


@dataclass(frozen=True)
class _SpecItem:
    pattern: str
    exclude: bool
    glob: bool  # ":(glob)": wildmatch, `*` stops at `/`
    literal: bool  # ":(literal)": no wildcards at all

    @cached_property
    def has_wildcard(self) -> bool:
        return not self.literal and any(c in self.pattern for c in "*?[\\")

    @cached_property
    def regex(self) -> re.Pattern[str]:
        if self.glob:
            return re.compile(wildmatch_regex(self.pattern), re.DOTALL)
        # plain pathspecs use fnmatch without FNM_PATHNAME: `*` matches `/` too
        return re.compile(fnmatch.translate(self.pattern), re.DOTALL)

    @cached_property
    def prefix(self) -> str:
        """The leading part without wildcards: only paths related to it can match."""
        if not self.has_wildcard:
            return self.pattern
        cut = min(i for i, c in enumerate(self.pattern) if c in "*?[\\")
        return self.pattern[:cut]

    def matches(self, path: str) -> bool:
        pat = self.pattern
        if pat == "" or path == pat or path.startswith(pat.rstrip("/") + "/"):
            return True
        return self.has_wildcard and self.regex.match(path) is not None


@dataclass(frozen=True)
class Pathspec:
    """Git pathspecs relative to the repository root: a path, a directory (its subtree), or a
    glob (`*` crosses `/` as in git); magic `:(exclude)`, `:!`, `:^`, `:(glob)`, `:(literal)`,
    `:/`. No pathspec, or only exclusions, selects everything (minus the exclusions)."""

    specs: Sequence[str] = ()
    items: tuple[_SpecItem, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "items", tuple(_parse_spec(s) for s in self.specs))

    def matches(self, path: str) -> bool:
        positive = [i for i in self.items if not i.exclude]
        if positive and not any(i.matches(path) for i in positive):
            return False
        return not any(i.matches(path) for i in self.items if i.exclude)

    def may_match_within(self, path: str) -> bool:
        """Whether `path` or anything below it can match (to skip whole subtrees)."""
        positive = [i for i in self.items if not i.exclude]
        if any(i.exclude and i.matches(path) and not i.has_wildcard for i in self.items):
            return False
        if not positive:
            return True
        for item in positive:
            prefix = item.prefix
            if item.matches(path) or prefix == "" or _is_within(prefix, path):
                return True
            if item.has_wildcard and path.startswith(prefix):
                return True
        return False


_MAGIC_WORDS = {"exclude", "glob", "literal", "top", "icase"}


def _parse_spec(spec: str) -> _SpecItem:
    exclude = glob = literal = False
    body = spec
    if spec.startswith(":("):
        close = spec.find(")")
        if close < 0:
            raise GitsessError(f"pathspec {spec!r}: missing ')' after the magic")
        words = [w.strip() for w in spec[2:close].split(",") if w.strip()]
        unknown = set(words) - _MAGIC_WORDS
        if unknown or "icase" in words:
            raise GitsessError(f"pathspec {spec!r}: unsupported magic {sorted(unknown or words)}")
        exclude, glob, literal = "exclude" in words, "glob" in words, "literal" in words
        body = spec[close + 1 :]
    elif spec.startswith(":"):
        short = spec[1:]
        while short[:1] in ("!", "^", "/"):
            exclude = exclude or short[0] in "!^"
            short = short[1:]
        body = short
    body = body.lstrip("/")
    if body in (".", "./"):
        body = ""
    return _SpecItem(body.removeprefix("./"), exclude, glob, literal)
