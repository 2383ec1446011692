"""A branch ref and an index written as git writes them: under git's own lock files.

`apply --commit` takes `index.lock` (when it updates the checked-out worktree), then `<ref>.lock`,
in `git commit`'s order, before it compares the branch's tip with the one its commit was built
on, and holds them until the ref has moved: a real `git commit` in between fails to lock, as
against any other git, and is never overwritten; a held `index.lock` stops the apply before any
real file is written. A lock another git holds is waited for a second (a commit's), then refused.
Each lock file holds a marker naming the apply's commit from the moment it is taken, so the
apply that completes a killed one (the same commit) takes its locks over; any other holder's
lock is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

from gitsess.errors import GitsessError
from gitsess.git.repo import common_dir

# How long a lock another git holds is waited for (git waits 100 ms for a ref's, by
# core.filesRefLockTimeout): long enough for a commit, short enough to say a stale one.
_WAIT_S = 1.0
_WAIT_STEP_S = 0.01


class Held(GitsessError):
    """A lock file someone else holds."""


class Moved(GitsessError):
    """The branch is not at the tip the commit was built on."""


class _Lock:
    def __init__(self, path: Path, marker: bytes) -> None:
        self.path = path
        self.lock = path.with_name(path.name + ".lock")
        self.done = False
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + _WAIT_S
        while True:
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                fd = os.open(self.lock, flags, 0o666)
                break
            except FileExistsError:
                if _content(self.lock) == marker:
                    fd = os.open(self.lock, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
                    break
                if time.monotonic() > deadline:
                    raise Held(
                        f"{self.lock} exists: another git process is running there (if none "
                        "is, remove the file and apply again)"
                    ) from None
                time.sleep(_WAIT_STEP_S)
        try:
            os.write(fd, marker)
        finally:
            os.close(fd)

    def commit(self) -> None:
        os.rename(self.lock, self.path)
        self.done = True

    def release(self) -> None:
        if not self.done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock)
            self.done = True


def _content(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


class RefLock:
    """`ref` of `repo`'s common dir, locked; `current` is its tip read under the lock."""

    def __init__(self, repo: pygit2.Repository, ref: str, new: str) -> None:
        self.repo = repo
        self.ref = ref
        self.new = new
        self._lock = _Lock(common_dir(repo) / ref, new.encode() + b"\n")
        try:
            self.current = _tip(repo, ref)
        except BaseException:
            self._lock.release()
            raise

    def swap(self, expected: str | None, message: str) -> None:
        """Move the ref to the new commit, from `expected` (None: it does not exist)."""
        if self.current == self.new:
            self._lock.release()
            return
        if self.current != expected:
            raise Moved(f"{self.ref} moved to {self.current} during the apply; apply again")
        self._lock.commit()
        line = _log_line(self.repo, expected, self.new, message)
        if _logs_refs(self.repo, self.ref):
            _append(common_dir(self.repo) / "logs" / self.ref, line)
        head = Path(self.repo.path) / "HEAD"
        if _content(head) == f"ref: {self.ref}\n".encode():
            _append(Path(self.repo.path) / "logs" / "HEAD", line)

    def release(self) -> None:
        self._lock.release()


class IndexLock:
    """The index of `repo`'s worktree, locked until `write` replaces it."""

    def __init__(self, repo: pygit2.Repository, marker: str) -> None:
        self.path = Path(repo.path) / "index"
        self._lock = _Lock(self.path, f"gitsess apply {marker}\n".encode())

    def write(self, update: Callable[[pygit2.Index], None]) -> None:
        """The index as it is now, changed by `update`, written whole and renamed in."""
        aside = Path(tempfile.mkdtemp(prefix="gitsess-index-", dir=self.path.parent))
        try:
            copy = aside / "index"
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(self.path, copy)
            index = pygit2.Index(str(copy))
            update(index)
            index.write()
            os.rename(copy, self._lock.lock)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        self._lock.commit()

    def release(self) -> None:
        self._lock.release()


def _tip(repo: pygit2.Repository, ref: str) -> str | None:
    try:
        return str(repo.references[ref].resolve().target)
    except KeyError:
        return None


def _logs_refs(repo: pygit2.Repository, ref: str) -> bool:
    """Whether git logs updates of `ref` (core.logAllRefUpdates; a log it already has)."""
    if (common_dir(repo) / "logs" / ref).exists():
        return True
    try:
        value = str(repo.config["core.logAllRefUpdates"]).lower()
    except KeyError:
        value = "false" if repo.is_bare else "true"
    if value == "always":
        return True
    return value in ("true", "yes", "on", "1") and ref.startswith(("refs/heads/", "refs/remotes/"))


def _log_line(repo: pygit2.Repository, old: str | None, new: str, message: str) -> bytes:
    try:
        sig = repo.default_signature
        name, email, offset = sig.name, sig.email, sig.offset
    except (KeyError, pygit2.GitError):
        commit = repo[new].peel(pygit2.Commit)
        name, email, offset = commit.committer.name, commit.committer.email, commit.committer.offset
    sign = "-" if offset < 0 else "+"
    zone = f"{sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"
    zero = "0" * len(new)
    return f"{old or zero} {new} {name} <{email}> {int(time.time())} {zone}\t{message}\n".encode()


def _append(path: Path, line: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
