"""Formatting figures and tables (rich and Markdown)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

# ---------------------------------------------------------------------------------- output


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def fmt_cpu(seconds: float | None) -> str:
    """CPU time, counted in ticks of 10 ms: whole milliseconds."""
    if seconds is None:
        return "-"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{round(seconds * 1000)} ms"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def fmt_kib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    t = Table(title=title)
    for i, name in enumerate(header):
        t.add_column(name, justify="left" if i == 0 or name == "goal" else "right")
    for row in rows:
        t.add_row(*[_colour(cell) for cell in row])
    return t


def _colour(cell: str) -> str:
    return cell.replace("MISSED", "[red]MISSED[/]").replace(" met", " [green]met[/]")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    align = ["---" if i == 0 or h == "goal" else "---:" for i, h in enumerate(header)]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"
