"""Plain tables for the small commands, without rich (whose import took longer than `ls` did).

Columns fit the terminal by shrinking the ones marked as such, in their order, down to their
minimum, then dropping them; the others (what a user types back: #, NAME, ID) are never cut.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Sequence
from typing import NamedTuple

import click

# C0 and C1 controls and DEL: shown as `\xNN`, never sent to the terminal (see base.escape).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


# Named tuples, not frozen dataclasses: `ls` starts faster without a dataclass's generated
# functions (see docs/ARCHITECTURE.md, "The small commands load what they use").
class Column(NamedTuple):
    header: str
    shrink: int | None = None  # the order it gives up room in (lowest first); None: never
    minimum: int = 8
    right: bool = False


class Cell(NamedTuple):
    text: str
    style: str | None = None  # a click colour, or "bold", "dim"


def clean(text: str) -> str:
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def width_of(text: str) -> int:
    """Terminal cells: wide East Asian characters take two, combining marks none."""
    if text.isascii():  # (no unicodedata to load for the usual table)
        return len(text)
    import unicodedata

    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def cut(text: str, width: int) -> str:
    if width_of(text) <= width:
        return text
    out, used = "", 0
    for c in text:
        w = width_of(c)
        if used + w > width - 1:
            break
        out, used = out + c, used + w
    return out + "…"


def colour() -> bool:
    """Styles on a terminal, unless NO_COLOR (https://no-color.org) is set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def terminal_width() -> int | None:
    """The terminal's columns; None when output goes elsewhere (nothing is cut then)."""
    if not sys.stdout.isatty():
        return None
    # shutil.get_terminal_size's rule, without importing shutil (and the compressors it loads).
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "")) > 0:
            return int(os.environ["COLUMNS"])
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except OSError:
        return 80


def fit(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None) -> list[int]:
    """Each column's width (0: dropped) so that a line fits in `width`."""
    widths = [
        max([width_of(c.header)] + [width_of(clean(r[i].text)) for r in rows])
        for i, c in enumerate(columns)
    ]
    if width is None:
        return widths

    order = [i for _, i in sorted((c.shrink, i) for i, c in enumerate(columns) if c.shrink)]
    natural = widths
    # Shrink in order; what still does not fit drops the first column, and the rest is
    # fitted again from its natural widths (a dropped TITLE gives WORKTREE its room back).
    for dropped in range(len(order) + 1):
        widths = [0 if i in order[:dropped] else w for i, w in enumerate(natural)]
        for i in order[dropped:]:
            excess = _total(widths) - width
            if excess <= 0:
                break
            widths[i] = max(columns[i].minimum, widths[i] - excess)
        if _total(widths) <= width:
            break
    return widths


def _total(widths: Sequence[int]) -> int:
    shown = [w for w in widths if w]
    return sum(shown) + 2 * (len(shown) - 1)


def render(
    columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None = None
) -> list[str]:
    widths = fit(columns, rows, width)
    styled = colour()
    lines = []
    header = [Cell(c.header, "bold") for c in columns]
    last = max(i for i, w in enumerate(widths) if w)
    for row in [header, *rows]:
        parts = []
        for i, (column, cell, w) in enumerate(zip(columns, row, widths, strict=True)):
            if not w:
                continue
            text = cut(clean(cell.text), w)
            pad = " " * (w - width_of(text))
            if column.right:
                text = pad + text
            elif i != last:
                text += pad
            if styled and cell.style:
                text = _style(text, cell.style)
            parts.append(text)
        lines.append("  ".join(parts))
    return lines


def _style(text: str, style: str) -> str:
    if style == "bold":
        return click.style(text, bold=True)
    if style == "dim":
        return click.style(text, dim=True)
    return click.style(text, fg=style)


def echo(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> None:
    for line in render(columns, rows, terminal_width()):
        click.echo(line)
