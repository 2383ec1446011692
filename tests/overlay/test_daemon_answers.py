"""The daemon's control connections as it stops: a request it carried out is answered, since a
client takes a connection closed unanswered for a request never read, and makes it again. Run
in process, on the daemon's own tree over a real delta (no mount): the moment its loop is
cancelled is chosen by the test, where the kernel would be told what the request changed."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest
import trio

from gitsess.overlay import daemon, history
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree
from tests.overlay.daemon_util import unmounted_state


def test_a_rewind_is_answered_though_the_daemon_stops_before_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test_mcp's undo of a run, then a rewind to the state the undo replaced, read "good"
    where "bad" was due (once in a full run at load 5-12): the daemon lingering after the run
    did the undo, its 0.3 s ran out before the answer (which waits for the kernel to be told),
    and the stop cancelled its loop. The command did the undo again offline, and that second
    undo's "before" held the state the first had rewound to: rewinding there brought nothing
    back."""
    (tmp_path / "lower").mkdir()
    (tmp_path / "session").mkdir()
    delta = str(tmp_path / "session" / "delta.db")
    store = DeltaStore(delta)
    tree = Tree(store, str(tmp_path / "lower"), set())
    f = tree.create(ROOT_INODE, b"f", stat.S_IFREG | 0o644, 0, 0)
    tree.write(f, 0, b"good\n")
    tree.save()
    good = store.mark("manual", "good", always=True)
    assert good is not None
    tree.truncate(f, 0)
    tree.write(f, 0, b"bad\n")
    mnt = str(tmp_path / "mnt")
    state = unmounted_state(tree, store, delta, mnt)
    telling, stopped = threading.Event(), threading.Event()

    def tell_kernel(entries: list[tuple[int, bytes]], inodes: list[int]) -> None:
        telling.set()
        assert stopped.wait(30)  # the kernel is told until the daemon's loop was cancelled

    monkeypatch.setattr(daemon, "_invalidate_all", tell_kernel)

    async def undo() -> bytes:
        ours, theirs = trio.socket.socketpair()
        client = trio.SocketStream(theirs)
        async with trio.open_nursery() as loop:
            loop.start_soon(daemon._client, state, trio.SocketStream(ours))
            request = {"op": "rewind", "target": good.id, "kind": "undo"}
            await client.send_all(json.dumps(request).encode() + b"\n")
            await trio.to_thread.run_sync(telling.wait)
            loop.cancel_scope.cancel()  # the daemon stops (`_serve` once FUSE ended)
            stopped.set()
        answer = b""
        while not answer.endswith(b"\n") and (part := await client.receive_some()):
            answer += part
        return answer

    try:
        answer = trio.run(undo)
        done = history.operations(store.conn)
        assert [(op.kind, op.target) for op in done] == [("undo", good.id)]
        assert answer and json.loads(answer) == {"ok": True, "operation": done[0].id}
        assert tree.read(tree.node(f.ino), 0, 10) == b"good\n"
    finally:
        state.checkpoints.close()
        tree.close()
        store.close()
