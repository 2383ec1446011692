"""What a session changed: the real worktree against the session's view, path by path.

Only the view's touched paths are walked (a touched directory stands for its subtree), so the
cost follows the size of the session's change, not the size of the worktree. Content is compared
by git blob id, so a file that was copied up but is byte-identical is not a change.

The change set keeps everything the filesystem can tell apart (permission bits, empty
directories), because `apply --worktree` reproduces those; diff, patch and commit look only at
what git can hold (`Change.git_visible`).
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

import pygit2

from gitsess import progress
from gitsess.errors import GitsessError
from gitsess.git.blobid import blob_id, file_blob_id, stream_blob_id
from gitsess.git.repo import common_dir
from gitsess.git.view import Entry, SessionView

StateKind = Literal["file", "symlink", "dir"]

GIT_FILE = 0o100644
GIT_EXEC = 0o100755
GIT_LINK = 0o120000

# Larger view files are hashed but not kept in a `store`: an ignored build artifact of gigabytes
# must not sit in memory; diff and commit read such a file again if they need it.
KEEP_LIMIT = 1 << 20


@dataclass(frozen=True)
class State:
    """One side of a changed path. `oid` is the git blob id of the content (of the link target
    for a symlink); None for a directory."""

    kind: StateKind
    mode: int  # full st_mode
    size: int
    mtime_ns: int
    oid: str | None

    @property
    def perm(self) -> int:
        return stat.S_IMODE(self.mode)

    @property
    def git_mode(self) -> int | None:
        """The mode git would record, None for a directory (git has no empty trees)."""
        if self.kind == "symlink":
            return GIT_LINK
        if self.kind == "file":
            # git keeps only the owner's execute bit, as `git add` does
            return GIT_EXEC if self.mode & stat.S_IXUSR else GIT_FILE
        return None

    def git_entry(self) -> tuple[str, int] | None:
        mode = self.git_mode
        if mode is None or self.oid is None:
            return None
        return self.oid, mode


@dataclass(frozen=True)
class Change:
    """`old` is the real worktree now, `new` the session's view; None where the path is absent."""

    path: str
    old: State | None
    new: State | None

    @property
    def git_old(self) -> tuple[str, int] | None:
        return self.old.git_entry() if self.old else None

    @property
    def git_new(self) -> tuple[str, int] | None:
        return self.new.git_entry() if self.new else None

    @property
    def git_visible(self) -> bool:
        """Whether git sees this change (content, type or execute bit of a file or symlink)."""
        return self.git_old != self.git_new


@dataclass(frozen=True)
class ChangeSet:
    """The selected changes, sorted by path, and the paths that differ but were left out (by
    pathspec, or by .gitignore for untracked paths). An excluded directory stands for its
    subtree."""

    changes: tuple[Change, ...]
    excluded: tuple[str, ...] = ()
    # Devices, fifos and sockets of the session's (not the worktree's): no change git can hold
    # nor apply write, so they stay in the session.
    special: tuple[str, ...] = ()

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.changes]

    def git_changes(self) -> list[Change]:
        return [c for c in self.changes if c.git_visible]


def compute_changes(
    view: SessionView,
    repo: pygit2.Repository,
    *,
    pathspecs: Sequence[str] = (),
    include_ignored: bool = False,
    store: pygit2.Repository | None = None,
) -> ChangeSet:
    """Compare the view with the real worktree of `repo` (opened on the session's worktree).

    Untracked paths that .gitignore (as the view sees it), `info/exclude` or `core.excludesFile`
    ignores are left out unless `include_ignored`; tracked paths (in the worktree's index) never
    are, as in git. `store`, a scratch repository (`diff.scratch_repo`), keeps the blobs of both
    sides' files (up to `KEEP_LIMIT` bytes) as they are hashed, so that a diff or a commit made
    with the same scratch repository reads them neither from the view nor from the object store.
    """
    if repo.workdir is None:
        raise GitsessError(f"{repo.path} has no worktree to compare a session with")
    spec = Pathspec(pathspecs)
    tracked = _Tracked(repo.index)
    ignore = None if include_ignored else Ignore(view, repo, tracked)
    walker = _Walker(view, Path(repo.workdir), spec, ignore, store)
    for path in touched_roots(view.touched_paths()):
        walker.start(path)
    return ChangeSet(
        tuple(sorted(walker.changes, key=lambda c: c.path)),
        tuple(sorted(walker.excluded)),
        tuple(sorted(walker.special)),
    )


def touched_roots(touched: Iterable[str]) -> list[str]:
    """Touched paths with those under another touched path dropped (that one covers them)."""
    roots: set[str] = set()
    for path in sorted({p.strip("/") for p in touched}, key=lambda p: (p.count("/"), p)):
        if path == "":
            return [""]  # the whole tree
        parts = path.split("/")
        if not any("/".join(parts[:depth]) in roots for depth in range(1, len(parts))):
            roots.add(path)
    return sorted(roots)


def _is_within(path: str, top: str) -> bool:
    return top == "" or path == top or path.startswith(top + "/")


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class _Walker:
    """Walks both sides below each touched path and collects the differences."""

    def __init__(
        self,
        view: SessionView,
        root: Path,
        spec: Pathspec,
        ignore: Ignore | None,
        store: pygit2.Repository | None,
    ) -> None:
        self.view = view
        self.store = store
        self._prefix = f"{root}/"  # str concatenation: a Path per lstat costs more than the call
        self.spec = spec
        self.ignore = ignore
        self.changes: list[Change] = []
        self.excluded: set[str] = set()
        self.special: list[str] = []
        # Whether a path and every path above it are directories, on each side: every touched
        # path asks about its parent, and n files in one directory would ask n times.
        self._real_dirs: dict[str, bool] = {"": True}
        self._view_dirs: dict[str, bool] = {"": True}

    def start(self, path: str) -> None:
        if not self.spec.may_match_within(path):
            self.excluded.add(path)
            return
        if path == "":
            self._children("", True, True)
            return
        if path.split("/")[0] == ".git":
            return
        # lstat would follow a symlink standing where a parent directory should be
        parent = _parent(path)
        old = self._real(path) if self._real_dirs_down_to(parent) else None
        new = self._view(path) if self._view_dirs_down_to(parent) else None
        self._visit(path, old, new)

    def _real_dirs_down_to(self, path: str) -> bool:
        known = self._real_dirs.get(path)
        if known is None:
            above = self._real_dirs_down_to(_parent(path))
            st = self._lstat(path) if above else None
            known = self._real_dirs[path] = st is not None and stat.S_ISDIR(st.st_mode)
        return known

    def _view_dirs_down_to(self, path: str) -> bool:
        known = self._view_dirs.get(path)
        if known is None:
            above = self._view_dirs_down_to(_parent(path))
            known = self._view_dirs[path] = above and self.view.is_dir(path)
        return known

    def _visit(self, path: str, old: State | None, new: State | None) -> None:
        old_dir = old is not None and old.kind == "dir"
        new_dir = new is not None and new.kind == "dir"
        differs = _differs(old, new)
        if not differs and not (old_dir or new_dir):
            return
        if self.ignore is not None and self.ignore.ignored(path, new_dir if new else old_dir):
            self.excluded.add(path)  # an ignored directory may hide differences below it
            return
        if differs:
            if self.spec.matches(path):
                self.changes.append(Change(path, old, new))
            else:
                self.excluded.add(path)
        if old_dir or new_dir:
            if not self.spec.may_match_within(path):
                self.excluded.add(path)
                return
            self._children(path, old_dir, new_dir)

    def _children(self, path: str, old_dir: bool, new_dir: bool) -> None:
        real = set(self._listdir(path)) if old_dir else set()
        seen = set(self.view.listdir(path)) if new_dir else set()
        for name in sorted(real | seen):
            if name == ".git":
                continue  # git's own directory (or an embedded repository's) is never content
            child = _join(path, name)
            old = self._real(child) if name in real else None
            new = self._view(child) if name in seen else None
            self._visit(child, old, new)

    def _listdir(self, path: str) -> list[str]:
        try:
            with os.scandir(self._prefix + path) as entries:
                return [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _lstat(self, path: str) -> os.stat_result | None:
        try:
            return os.lstat(self._prefix + path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _real(self, path: str) -> State | None:
        st = self._lstat(path)
        if st is None:
            return None
        full = self._prefix + path
        if stat.S_ISREG(st.st_mode):
            kind: StateKind = "file"
            oid: str | None = self._real_file(full, st.st_size)
        elif stat.S_ISLNK(st.st_mode):
            kind, oid = "symlink", str(blob_id(os.fsencode(os.readlink(full))))
        elif stat.S_ISDIR(st.st_mode):
            kind, oid = "dir", None
        else:
            return None  # sockets, fifos, devices: git does not track them
        return State(kind, st.st_mode, st.st_size, st.st_mtime_ns, oid)

    def _real_file(self, full: str, size: int) -> str:
        """Kept in `store` as well: a diff then reads the old side from memory, not the
        object store (where a tracked file's blob is usually deflated, often a delta)."""
        if self.store is None or size > KEEP_LIMIT:
            return str(file_blob_id(full))
        with open(full, "rb") as f:
            # a read of KEEP_LIMIT would allocate (and fault in) a buffer that big per file
            data = f.read(size + 1)
        if len(data) > size:  # grown since its lstat: perhaps past the limit
            return str(file_blob_id(full))
        return str(self.store.create_blob(data))

    def _view(self, path: str) -> State | None:
        entry = self.view.entry(path)
        if entry is None:
            return None
        if entry.kind == "file":
            if entry.size > KEEP_LIMIT:
                # Hashed in parts: a file of any size costs a buffer, not its size in memory.
                with self.view.open(path) as f, progress.reading(f, path, entry.size) as read:
                    return _from_entry(entry, "file", stream_blob_id(read, entry.size, path))
            data = self.view.read(path)
            if self.store is not None:
                return _from_entry(entry, "file", self.store.create_blob(data))
            return _from_entry(entry, "file", blob_id(data))
        if entry.kind == "symlink":
            target = os.fsencode(self.view.readlink(path))
            return _from_entry(entry, "symlink", blob_id(target))
        if entry.kind == "dir":
            return State("dir", entry.mode, entry.size, entry.mtime_ns, None)
        self._note_special(path, entry)
        return None

    def _note_special(self, path: str, entry: Entry) -> None:
        """A device, fifo or socket in the view, unless the worktree has one there too."""
        real = self._lstat(path)
        if real is not None and stat.S_IFMT(real.st_mode) == stat.S_IFMT(entry.mode):
            return
        if not self.spec.matches(path) or (
            self.ignore is not None and self.ignore.ignored(path, False)
        ):
            return
        self.special.append(path)


def _from_entry(entry: Entry, kind: StateKind, oid: pygit2.Oid) -> State:
    return State(kind, entry.mode, entry.size, entry.mtime_ns, str(oid))


def _differs(old: State | None, new: State | None) -> bool:
    """Whether the filesystem can tell the two apart; times do not count."""
    if old is None or new is None:
        return old is not new
    return old.kind != new.kind or old.oid != new.oid or old.perm != new.perm


class _Tracked:
    """Paths in the worktree's index, and the directories holding them (computed on demand)."""

    def __init__(self, index: pygit2.Index) -> None:
        self.index = index

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and (path in self.index or path in self._dirs)

    @cached_property
    def _dirs(self) -> frozenset[str]:
        dirs: set[str] = set()
        for entry in self.index:
            parent = _parent(entry.path)
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = _parent(parent)
        return frozenset(dirs)


# ---------------------------------------------------------------------------------------------
# pathspecs


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


# ---------------------------------------------------------------------------------------------
# .gitignore


def wildmatch_regex(pattern: str) -> str:
    """A regex (for `fullmatch`) equivalent to git's wildmatch with WM_PATHNAME."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            starts = i == 0 or pattern[i - 1] == "/"
            if j - i >= 2 and starts and j == n:
                out.append(".*")
            elif j - i >= 2 and starts and pattern[j] == "/":
                out.append("(?:.*/)?")
                j += 1  # the slash is part of "**/", which also matches no directory
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            cls, i = _bracket(pattern, i)
            if cls is None:
                return "(?!)"  # an unterminated bracket makes wildmatch fail everything
            out.append(cls)
            continue
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _bracket(pattern: str, start: int) -> tuple[str | None, int]:
    """Translate the bracket expression at `start`; returns (regex, index after it)."""
    i = start + 1
    n = len(pattern)
    negate = i < n and pattern[i] in "!^"
    if negate:
        i += 1
    parts: list[str] = []
    first = True
    while i < n and (pattern[i] != "]" or first):
        first = False
        c = pattern[i]
        if c == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end > 0 else ""
            if name in _POSIX_CLASSES:
                parts.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
        if c == "\\" and i + 1 < n:
            i += 1
            c = pattern[i]
        if i + 2 < n and pattern[i + 1] == "-" and pattern[i + 2] != "]":
            hi = pattern[i + 2]
            if hi == "\\" and i + 3 < n:
                hi = pattern[i + 3]
                i += 1
            parts.append(f"{re.escape(c)}-{re.escape(hi)}")
            i += 3
            continue
        parts.append(re.escape(c))
        i += 1
    if i >= n:
        return None, n
    body = "".join(parts)
    # a bracket never matches "/" under WM_PATHNAME
    return ("(?!/)" + (f"[^{body}]" if negate else f"[{body}]")), i + 1


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


class Ignore:
    """Git's ignore rules as the session sees them: the view's .gitignore files, then the
    repository's info/exclude and core.excludesFile. Tracked paths are never ignored."""

    def __init__(
        self,
        view: SessionView,
        repo: pygit2.Repository,
        tracked: Container[str] | None = None,
    ) -> None:
        self.view = view
        self.global_rules = _global_rules(repo)
        self._tracked = tracked
        self._per_dir: dict[str, list[IgnoreRule]] = {}
        self._in_force: dict[str, list[IgnoreRule]] = {}
        self._dir_ignored: dict[str, bool] = {}

    def ignored(self, path: str, is_dir: bool) -> bool:
        if self._is_tracked(path):
            return False
        parent = _parent(path)
        if parent and self._dir_is_ignored(parent):
            return True
        return self._decide(path, is_dir)

    def _is_tracked(self, path: str) -> bool:
        return self._tracked is not None and path in self._tracked

    def _dir_is_ignored(self, path: str) -> bool:
        # a directory that is ignored hides all below it: nothing inside can be re-included
        cached = self._dir_ignored.get(path)
        if cached is None:
            parent = _parent(path)
            cached = (bool(parent) and self._dir_is_ignored(parent)) or self._decide(path, True)
            self._dir_ignored[path] = cached
        return cached

    def _decide(self, path: str, is_dir: bool) -> bool:
        for rule in reversed(self._rules_for(_parent(path))):
            if rule.matches(path, is_dir):
                return not rule.negate
        return False

    def _rules_for(self, directory: str) -> list[IgnoreRule]:
        """Rules in force in `directory`, lowest precedence first."""
        rules = self._in_force.get(directory)
        if rules is None:
            outer = self._rules_for(_parent(directory)) if directory else self.global_rules
            rules = outer + self._dir_rules(directory)
            self._in_force[directory] = rules
        return rules

    def _dir_rules(self, directory: str) -> list[IgnoreRule]:
        rules = self._per_dir.get(directory)
        if rules is None:
            name = _join(directory, ".gitignore")
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
