"""Progress of long work: big files read a part at a time (see `git.scratch.BIG_FILE`).

The code that reads them reports through `reading`; nothing is shown unless the command set a
`Reporter` with `reporting` (the command line does, when stderr is a terminal). A context
variable, so that no service signature carries it and a test can watch it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, BinaryIO, Protocol, cast


class Reporter(Protocol):
    def start(self, label: str, total: int) -> object:
        """A new piece of work of `total` bytes; returns a handle for `advance`."""
        ...

    def advance(self, handle: object, done: int) -> None: ...

    def finish(self, handle: object) -> None: ...


_REPORTER: ContextVar[Reporter | None] = ContextVar("gitsess_progress", default=None)


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


@contextmanager
def reading(stream: BinaryIO, label: str, total: int) -> Iterator[BinaryIO]:
    """`stream`, reporting how much of its `total` bytes was read. `label` names the pass
    (such as "hashing PATH", then "storing PATH"), so that a second pass over one file reads
    as a new piece of work rather than a bar starting again at 0."""
    reporter = _REPORTER.get()
    if reporter is None:
        yield stream
        return
    handle = reporter.start(label, total)
    try:
        yield cast(BinaryIO, io.BufferedReader(_Counted(stream, reporter, handle), 1 << 20))
    finally:
        reporter.finish(handle)


def active() -> bool:
    """Whether anyone shows progress (a terminal does): work may skip measuring otherwise."""
    return _REPORTER.get() is not None


def counting(parts: Iterable[bytes], label: str, total: int) -> Iterator[bytes]:
    """`parts`, reporting how many of `total` bytes went by."""
    reporter = _REPORTER.get()
    if reporter is None:
        yield from parts
        return
    handle = reporter.start(label, total)
    done = 0
    try:
        for part in parts:
            done += len(part)
            reporter.advance(handle, done)
            yield part
    finally:
        reporter.finish(handle)


class _Counted(io.RawIOBase):
    """A stream whose reads are counted."""

    def __init__(self, stream: BinaryIO, reporter: Reporter, handle: object) -> None:
        super().__init__()
        self._stream = stream
        self._reporter = reporter
        self._handle = handle
        self._done = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        self._done += len(data)
        self._reporter.advance(self._handle, self._done)
        return len(data)
