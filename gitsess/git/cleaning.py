"""What git stores for a worktree file: its bytes through the clean filters that
`.gitattributes` and `core.autocrlf` name (end-of-line conversion, `ident`), as `git add` stores
them. An `apply --commit` that committed a session's file byte for byte would commit CRLF lines
where the repository keeps LF (`text=auto`), and every later `git add` of the file would change
all of its lines back.

libgit2 runs the filters git has built in, with git's rules (a file whose blob in the index has
CRLF lines keeps them). A filter driver with a command of its own (`filter=lfs`, whose clean
step turns a big file into a pointer) only git runs: such a file is refused, not committed
whole. The attributes are the real worktree's (and the real index's): a session's own change of
a `.gitattributes` counts from its apply on.
"""

from __future__ import annotations

import os

import pygit2
from pygit2.filter import FilterList

from gitsess.errors import GitsessError


class Cleaner:
    """The clean filters of the repository `repo` (opened on a worktree), by path. Each path's
    filters are looked up once (an attribute lookup costs some 15 us, 1,000 of them a
    twentieth of an apply of 1,000 files), and the `filter` attribute only where some driver
    has a command configured."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self._repo = repo
        self._drivers = {
            name[len("filter.") :].rpartition(".")[0]  # (a driver's name may hold dots)
            for name in (entry.name for entry in repo.config)
            if name.startswith("filter.") and name.endswith((".clean", ".process"))
        }
        self._lists: dict[str, FilterList | None] = {}
        # path -> (the blob stored, the blob of the file's own bytes), where they differ
        self._cleaned: dict[str, tuple[str, str]] = {}

    def refuse_driver(self, path: str) -> None:
        """Refuse `path` if a filter driver with a clean command of its own applies to it
        (a driver named in `.gitattributes` but configured nowhere filters nothing, in git
        too)."""
        if not self._drivers:
            return
        driver = self._repo.get_attr(os.fsencode(path), "filter")
        if isinstance(driver, str) and driver in self._drivers:
            raise GitsessError(
                f"{path} has the gitattributes filter {driver!r}, whose clean command only git "
                "runs: commit it with git inside the session (git add, git commit), then apply"
            )

    def filters(self, path: str) -> bool:
        """Whether a built-in filter applies to `path` (it may still leave the bytes as they
        are: `text=auto` on a file with LF lines)."""
        return self._filters(path) is not None

    def clean(self, path: str, data: bytes) -> bytes:
        """`data`, the file at `path`, through the built-in filters, as git would store it."""
        filters = self._filters(path)
        return data if filters is None else filters.apply_to_buffer(data)

    def cleaned(self, path: str, stored: str, own: str) -> None:
        """Note that the file at `path` was stored as blob `stored`, its bytes being `own`."""
        self._cleaned[path] = (stored, own)

    def own_blob(self, path: str, stored: str) -> str | None:
        """The blob of the file's own bytes that blob `stored` was cleaned from, if it was."""
        found = self._cleaned.get(path)
        return found[1] if found is not None and found[0] == stored else None

    def _filters(self, path: str) -> FilterList | None:
        if path not in self._lists:
            # (bytes: a name that is not UTF-8 is one git stores too; pygit2 takes them)
            self._lists[path] = self._repo.load_filter_list(os.fsencode(path))  # type: ignore[arg-type]
        return self._lists[path]
