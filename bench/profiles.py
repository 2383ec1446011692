"""Reading the gitsess daemon's cProfile output (`--profile`) into tables."""

from __future__ import annotations

import pstats
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

# ---------------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class ProfileRow:
    function: str
    calls: int
    own: float  # seconds in the function itself
    cumulative: float


def _where(key: tuple[str, int, str]) -> str:
    filename, _, name = key
    if filename == "~":
        return name  # a builtin
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("gitsess") :]) if "gitsess" in parts else parts[-1]
    return f"{short}:{name}"


# Where the daemon's event loop waits for the kernel: idle time, not work.
IDLE = ("<method 'poll' of 'select.epoll' objects>",)


def summarize_profile(path: Path, top: int = 15) -> tuple[float, list[ProfileRow]]:
    """Busy seconds of the daemon's main thread, and its functions by their own time."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = [
        ProfileRow(_where(key), nc, tt, ct)
        for key, (_, nc, tt, ct, _) in raw.items()
        if key[2] not in IDLE
    ]
    busy = sum(r.own for r in rows)
    rows.sort(key=lambda r: r.own, reverse=True)
    return busy, rows[:top]


def handler_calls(path: Path) -> list[ProfileRow]:
    """The FUSE handlers of gitsess/overlay/fs.py: how often the kernel asked, and their cost."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = [
        ProfileRow(_where(key), nc, tt, ct)
        for key, (_, nc, tt, ct, _) in raw.items()
        if key[0].endswith("overlay/fs.py") and not key[2].startswith("_") and key[2] != "wrapper"
    ]
    return sorted(rows, key=lambda r: r.cumulative, reverse=True)


def profile_tables(path: Path) -> list[Table]:
    busy, rows = summarize_profile(path)
    t = Table(title=f"gitsess daemon under cProfile: {path.stem} ({busy:.2f} s busy)")
    t.add_column("function (own time)")
    t.add_column("calls", justify="right")
    t.add_column("own", justify="right")
    t.add_column("cumulative", justify="right")
    for r in rows:
        t.add_row(r.function, f"{r.calls:,}", share(r.own, busy), share(r.cumulative, busy))
    h = Table(title=f"FUSE requests served: {path.stem}")
    h.add_column("handler")
    h.add_column("calls", justify="right")
    h.add_column("cumulative", justify="right")
    for r in handler_calls(path):
        h.add_row(r.function, f"{r.calls:,}", share(r.cumulative, busy))
    return [t, h]


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"
