"""What a change a process asks of the view leaves besides the change itself: an audit event (who
changed what: `audit.py`) and an entry in the fsmonitor journal (which paths git must look at
again: `fsmonitor.py`).

The parts of `Tree` that change the view (`Namespace`, `ContentStore`, `Attributes`) record
here when the caller names the process (`by`, its pid; 0 when the kernel did not say), so the
FUSE adapter and the offline writer (`services/viewwrite.py`) leave the same trace. Changes
gitsess makes on its own account (the git unit taken, applied paths dropped) name no process
and are not audited.
"""

from __future__ import annotations

from collections.abc import Callable

from gitsess.overlay.audit import Audit
from gitsess.overlay.fsmonitor import FsmonitorJournal
from gitsess.overlay.nodes import Node


class ChangeRecorder:
    def __init__(
        self, audit: Audit, journal: FsmonitorJournal, path_of: Callable[[Node], bytes]
    ) -> None:
        self.audit = audit
        self.journal = journal
        self._path_of = path_of

    def changed(
        self, op: str, path: bytes, by: int, *, target: bytes | None = None, is_dir: bool = False
    ) -> None:
        """`op` at `path` by process `by` (`target`: a symlink's)."""
        self.audit.record(op, path, by, target=target)
        self.journal.note(path, is_dir=is_dir)

    def touched(self, path: bytes, *, is_dir: bool = False) -> None:
        """A change git must look at that is no event of the audit log's (times set, an
        applied path dropped)."""
        self.journal.note(path, is_dir=is_dir)

    def audited(self, op: str, path: bytes, by: int) -> None:
        """A change of the audit log's that git never looks at (extended attributes), or one
        of several in one request whose path is `touched` once."""
        self.audit.record(op, path, by)

    def moved(self, op: str, path: bytes, new: bytes, by: int, *, is_dir: bool = False) -> None:
        """A rename or link of `path` to `new`: both paths changed."""
        self.audit.record(op, path, by, target=new)
        self.journal.note(path, is_dir=is_dir)
        self.journal.note(new, is_dir=is_dir)

    def wrote(self, n: Node, by: int, nbytes: int) -> None:
        """A write of `nbytes` to file `n`: added to the record of the run of writes it
        continues, or the first of a new one (its path found only then: writes are the hot
        path)."""
        if not self.audit.add_write(n.ino, by, nbytes):
            path = self._path_of(n)
            self.audit.record_write(n.ino, path, by, nbytes)
            self.journal.note(path)
