"""`progress.Reporter` as bars on stderr: one per big file read, while the command runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gitsess import progress

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class TerminalBars:
    """Bars made on the first piece of work: rich loads only for a command that reads a big
    file (its import is a tenth of a short command's time)."""

    def __init__(self) -> None:
        self._shown: Progress | None = None

    def start(self, label: str, total: int) -> object:
        if self._shown is None:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

            self._shown = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._shown.start()
        return self._shown.add_task(label, total=total)

    def advance(self, handle: object, done: int) -> None:
        assert self._shown is not None
        self._shown.update(_task(handle), completed=done)

    def finish(self, handle: object) -> None:
        assert self._shown is not None
        self._shown.remove_task(_task(handle))

    def close(self) -> None:
        if self._shown is not None:
            self._shown.stop()


def _task(handle: object) -> TaskID:
    from rich.progress import TaskID

    assert isinstance(handle, int)
    return TaskID(handle)


@contextmanager
def bars() -> Iterator[None]:
    """Progress shown on stderr while the block runs."""
    bars = TerminalBars()
    try:
        with progress.reporting(bars):
            yield
    finally:
        bars.close()
