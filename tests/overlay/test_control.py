"""Whether a daemon serves a session, asked without connecting to it."""

from __future__ import annotations

import contextlib
import socket
import uuid

from gitsess.overlay import control


def test_a_daemon_that_accepts_no_more_still_counts_as_serving() -> None:
    session = f"test-{uuid.uuid4()}"
    assert not control.serving(session)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    clients: list[socket.socket] = []
    try:
        listener.bind(control.address(session))
        listener.listen(1)
        assert control.serving(session)
        # Nothing accepts (a stopping daemon): the backlog fills and connecting fails ...
        full = False
        for _ in range(4):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            clients.append(client)
            try:
                client.connect(control.address(session))
            except BlockingIOError:
                full = True
        assert full
        # ... but the question is still answered, and leaves nothing in the backlog.
        assert control.serving(session)
    finally:
        for client in clients:
            with contextlib.suppress(OSError):
                client.close()
        listener.close()
    assert not control.serving(session)
