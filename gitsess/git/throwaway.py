"""A throwaway checkout of one commit: a repository in a temporary directory whose objects are
the real repository's (an alternate: nothing is copied), HEAD detached at the commit. What a
gated apply runs its test command in; removed whole on exit."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pygit2

from gitsess.git.repo import common_dir


@contextmanager
def checkout(repo: pygit2.Repository, commit: str) -> Iterator[Path]:
    """The files of `commit` in a fresh directory, with a `.git` that git commands inside
    can read (log, diff, status); the real repository is never written."""
    where = Path(tempfile.mkdtemp(prefix="gitsess-test-"))
    try:
        made = pygit2.init_repository(str(where))
        alternates = Path(made.path) / "objects" / "info" / "alternates"
        alternates.write_text(f"{common_dir(repo) / 'objects'}\n")
        # Opened again: the alternates file is read when a repository is opened.
        view = pygit2.Repository(str(where))
        view.set_head(pygit2.Oid(hex=commit))
        view.checkout_head(strategy=pygit2.enums.CheckoutStrategy.FORCE)  # type: ignore[no-untyped-call]
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
