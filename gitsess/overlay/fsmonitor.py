"""The change journal behind git's fsmonitor: which view paths changed since a token.

Fed by every change through the mount and every change the worktree watch sees. A token names
the journal's instance and a position; a token from another instance (another daemon's, or one
given before the watch came in place: `restart`), or older than what the journal still holds,
gets the answer "everything may have changed", so git stays correct.
"""

from __future__ import annotations

import uuid
from collections import deque

KEEP = 200_000


class FsmonitorJournal:
    def __init__(self) -> None:
        self.instance = uuid.uuid4().hex[:12]
        self.seq = 0
        self._entries: deque[tuple[int, bytes]] = deque(maxlen=KEEP)

    def note(self, path: bytes, *, is_dir: bool = False) -> None:
        self.seq += 1
        self._entries.append((self.seq, path))
        if is_dir:
            # A directory's whole subtree may have changed (rmdir, rename): git reads a
            # trailing slash as "everything below".
            self._entries.append((self.seq, path + b"/"))

    def restart(self) -> None:
        """Every token given so far gets "everything" from now on: the worktree may have
        changed unseen before (its watch was not in place yet, or was lost)."""
        self.instance = uuid.uuid4().hex[:12]

    def token(self) -> str:
        return f"gitsess:{self.instance}:{self.seq}"

    def since(self, token: str) -> list[bytes] | None:
        """Paths changed after `token`, or None when the journal cannot tell."""
        prefix = f"gitsess:{self.instance}:"
        if not token.startswith(prefix):
            return None
        try:
            start = int(token[len(prefix) :])
        except ValueError:
            return None
        if start > self.seq:
            return None
        if self._entries and start < self._entries[0][0] - 1 and len(self._entries) == KEEP:
            return None
        return sorted({path for seq, path in self._entries if seq > start})
