"""Who did what: a file's writes, recorded when it is released, keep the run that wrote them."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from gitsess.overlay import fs
from gitsess.overlay.audit import Participant
from gitsess.overlay.store import DeltaStore
from gitsess.overlay.tree import Tree


def test_writes_released_after_their_run_left_keep_that_run(tmp_path: Path) -> None:
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
        audit.participants[os.getpid()] = Participant("agent", 7)
        audit.forget_participants()
        node = tree.resolve(b"file")
        assert node is not None
        fh = filesystem._open_handle(node, None, os.getpid()).fh

        async def write_then_leave_then_release() -> None:
            await filesystem.write(fh, 0, b"new\n")
            # The run's command exited and its `gitsess run` left before the kernel's
            # asynchronous RELEASE was served (the daemon serves control requests first).
            del audit.participants[os.getpid()]
            audit.forget_participants()
            await filesystem.release(fh)

        trio.run(write_then_leave_then_release)
        (write,) = [e for e in audit.events if e[1] == "write"]
        assert write[-1] == 7 and write[-2] == "agent"
        assert write[4] == len(b"new\n")
        tree.close()
    finally:
        store.close()
