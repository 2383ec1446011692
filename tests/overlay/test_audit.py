"""Who did what: a run of writes is one record, made at the first, with the run of that time."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pyfuse3
import trio

from gitsess.overlay import fs
from gitsess.overlay.audit import Attribution, Audit
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.tree import Tree


@dataclass(frozen=True)
class _Context:
    """All `write` reads of a WRITE's request context (patch item 12): its writer."""

    pid: int


def test_writes_keep_the_run_of_their_first_write(tmp_path: Path) -> None:
    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "file").write_text("old\n")
    os.makedirs(tmp_path / "session")
    store = DeltaStore(str(tmp_path / "session" / "delta.db"))
    try:
        tree = Tree(store, str(lower), set())
        filesystem = fs.Filesystem(tree)
        audit = tree.audit
        # This process is the participant: its run's writes are attributed to run 7.
        audit.participants[os.getpid()] = Attribution("agent", 7)
        audit.forget_participants()
        node = tree.resolve(b"file")
        assert node is not None
        fh = filesystem._open_handle(node, os.getpid()).fh
        ctx = cast(pyfuse3.RequestContext, _Context(os.getpid()))

        async def write_leave_write() -> None:
            await filesystem.write(fh, 0, b"new\n", ctx)
            # The run's command exited and its `gitsess run` left while the file was still
            # being written (its last writes in flight, or the same process handed on).
            del audit.participants[os.getpid()]
            audit.forget_participants()
            await filesystem.write(fh, 4, b"more\n", ctx)
            await filesystem.release(fh)

        trio.run(write_leave_write)
        (write,) = [e for e in audit.events if e[1] == "write"]
        assert write[-1] == 7 and write[-2] == "agent"
        assert write[4] == len(b"new\nmore\n")
        tree.close()
    finally:
        store.close()


def test_another_event_ends_a_run_of_writes() -> None:
    audit = Audit()

    def write(ino: int, pid: int, nbytes: int, path: bytes) -> bool:
        """Whether the write began a record."""
        if audit.add_write(ino, pid, nbytes):
            return False
        audit.record_write(ino, path, pid, nbytes)
        return True

    for _ in range(3):
        assert write(5, 100, 10, b"a") is (_ == 0)
    assert write(6, 100, 1, b"b")  # another file: a record of its own
    assert write(5, 101, 2, b"a")  # another writer too
    audit.record("rename", b"a", 100, target=b"c")
    assert write(5, 100, 4, b"c")
    _, events = audit.drain()
    assert [(e[1], e[2], e[4], e[5]) for e in events] == [
        ("write", "a", 30, 100),
        ("write", "b", 1, 100),
        ("write", "a", 2, 101),
        ("rename", "a", None, 100),
        ("write", "c", 4, 100),
    ]
    assert write(5, 100, 1, b"c")  # a commit ends a run too
