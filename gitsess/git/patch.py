"""A session's changes as a patch (`git apply` input) or an mbox mail (`git am` input).

The patch is made into a spooled body (memory up to 8 MiB, then a temporary file) and copied out
in parts. Big files are carried as a "GIT binary patch" literal written in parts
(`binary_patch`; the forward hunk only, which is all `git apply` needs).
"""

from __future__ import annotations

import email.utils
import shutil
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from email.header import Header
from typing import BinaryIO, cast

import pygit2

from gitsess.git.changes import ChangeSet
from gitsess.git.diff import diff_changes
from gitsess.git.merge import Merged
from gitsess.git.objects import as_signature
from gitsess.git.repo import Person
from gitsess.git.view import SessionView
from gitsess.git.worktree_writes import parent_dirs


@dataclass(frozen=True)
class PatchResult:
    # `git apply` (or, with mbox, `git am`) input, from its start; empty when nothing changed.
    # A file: past `SPOOL_LIMIT` it is on disk, as a patch of a big file is as big.
    body: BinaryIO
    paths: tuple[str, ...]  # paths the patch touches (both sides of renames)
    skipped: tuple[str, ...]  # changes a patch cannot carry (permission bits, empty dirs)
    dry_run: bool = False  # making a patch changes nothing; this tells the caller not to write it

    @property
    def text(self) -> bytes:
        """The whole patch in memory: for small ones."""
        self.body.seek(0)
        return self.body.read()

    def write_to(self, out: BinaryIO) -> None:
        self.body.seek(0)
        shutil.copyfileobj(self.body, out)


# Past this size, a patch being made goes to a temporary file.
SPOOL_LIMIT = 8 << 20


def spooled(data: bytes = b"") -> BinaryIO:
    """A patch body: in memory up to `SPOOL_LIMIT`, then in a temporary file."""
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL_LIMIT)  # noqa: SIM115 (the result owns it)
    body.write(data)
    return cast(BinaryIO, body)


def make_patch(
    repo: pygit2.Repository,
    view: SessionView,
    changes: ChangeSet,
    *,
    mbox: bool = False,
    message: str = "",
    author: Person | pygit2.Signature | None = None,
    find_renames: bool = True,
    dry_run: bool = False,
    merged: Merged | None = None,
    scratch: pygit2.Repository | None = None,
) -> PatchResult:
    """A patch of the changes against the real worktree, binary files included (git's
    `--binary` form), which `git apply` takes in that worktree. With `mbox`, a `git am` mail
    (From line, From:, Date:, Subject: from `message`'s first paragraph, `author`'s time)."""
    result = diff_changes(
        repo, view, changes, binary=True, find_renames=find_renames, scratch=scratch,
        merged=merged.entries if merged is not None else None,
    )  # fmt: skip
    paths: list[str] = []
    for f in result.files:
        paths.extend(p for p in (f.old_path, f.new_path) if p is not None and p not in paths)
    skipped = left_out_by_git(changes)
    body = spooled()
    if mbox and result.files:
        body.write(mbox_head(message, as_signature(repo, author, "AUTHOR"), result.stat))
        result.write_patch(body)
        body.write(MBOX_TAIL)
    else:
        result.write_patch(body)
    return PatchResult(body, tuple(paths), skipped, dry_run)


def left_out_by_git(changes: ChangeSet) -> tuple[str, ...]:
    """What a commit or patch cannot carry, which stays in the session: changes git does not
    see (permission bits, empty directories), devices, fifos and sockets."""
    carried = carried_by_git(changes)
    return tuple(sorted([*(p for p in changes.paths if p not in carried), *changes.special]))


def carried_by_git(changes: ChangeSet) -> set[str]:
    """Paths whose change a commit or patch carries: git-visible ones, and directories that
    appear or disappear with git-visible changes below them (git has no directories of its
    own; their permission bits are not carried)."""
    carried = {c.path for c in changes.changes if c.git_visible}
    holding = {parent for path in carried for parent in parent_dirs(path)}
    for change in changes.changes:
        appears_or_goes = (change.old is None or change.old.kind != "dir") != (
            change.new is None or change.new.kind != "dir"
        )
        if appears_or_goes and change.path in holding:
            carried.add(change.path)
    return carried


def mbox_mail(message: str, author: pygit2.Signature, stat_text: str, patch: bytes) -> bytes:
    return mbox_head(message, author, stat_text) + patch + MBOX_TAIL


MBOX_TAIL = b"-- \ngitsess\n\n"


def mbox_head(message: str, author: pygit2.Signature, stat_text: str) -> bytes:
    """A `git am` mail up to its patch."""
    subject, body = _split_message(message)
    zone = timezone(timedelta(minutes=author.offset))
    when = datetime.fromtimestamp(author.time, UTC).astimezone(zone)
    head = [
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001",
        f"From: {_address(author.name, author.email)}",
        f"Date: {email.utils.format_datetime(when)}",
        f"Subject: {_header_text('[PATCH] ' + subject)}",
        "MIME-Version: 1.0",
        "Content-Type: text/plain; charset=UTF-8",
        "Content-Transfer-Encoding: 8bit",
        "",
    ]
    text = "\n".join(head) + "\n" + (body + "\n" if body else "") + "---\n" + stat_text + "\n"
    return text.encode()


def _split_message(message: str) -> tuple[str, str]:
    """Subject (first paragraph on one line) and body, as git format-patch does."""
    paragraphs = message.strip().split("\n\n", 1)
    subject = " ".join(line.strip() for line in paragraphs[0].splitlines()) or "gitsess changes"
    body = paragraphs[1].strip("\n") + "\n" if len(paragraphs) > 1 else ""
    return subject, body


def _header_text(text: str) -> str:
    if text.isascii():
        return text
    return Header(text, "utf-8").encode()


def _address(name: str, addr: str) -> str:
    if name.isascii():
        return f"{name} <{addr}>"
    return f"{Header(name, 'utf-8').encode()} <{addr}>"
