"""`git diff --stat` text, laid out as git lays it out (`show_stats` in git's diff.c): names
quoted as git quotes them (`quoting.py`), a rename as `dir/{old => new}`, a binary file as
`Bin OLD -> NEW bytes`, the graph scaled to the width, and a type change counted once. libgit2's
own stat printed names as raw text (a newline broke a line) and counted a type change twice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gitsess.git.quoting import quote_path


@dataclass(frozen=True)
class StatFile:
    """What the stat needs of one file of a diff."""

    old_path: str | None
    new_path: str | None
    binary: bool
    additions: int  # for a binary file, the new size in bytes
    deletions: int  # for a binary file, the old size in bytes


def format_stat(files: Sequence[StatFile], width: int = 80) -> str:
    """The stat of `files`, at most `width` columns wide where it can be."""
    if not files:
        return ""
    names = [_print_name(f) for f in files]
    max_len = max(len(n) for n in names)
    text = [f for f in files if not f.binary]
    max_change = max((f.additions + f.deletions for f in text), default=0)
    bin_width = max(
        (14 + _digits(f.additions) + _digits(f.deletions) for f in files if f.binary), default=0
    )
    number_width = max(_digits(max_change), 3 if bin_width else 0)
    width = max(width, 16 + 6 + number_width)
    graph_width = max_change if max_change + 4 > bin_width else bin_width - 4
    name_width = max_len
    if name_width + number_width + 6 + graph_width > width:
        if graph_width > width * 3 // 8 - number_width - 6:
            graph_width = max(width * 3 // 8 - number_width - 6, 6)
        if name_width > width - number_width - 6 - graph_width:
            name_width = width - number_width - 6 - graph_width
        else:
            graph_width = width - number_width - 6 - name_width
    lines = []
    for f, name in zip(files, names, strict=True):
        shown = _fit(name, name_width)
        padding = " " * max(name_width - len(shown), 0)
        if f.binary:
            line = f" {shown}{padding} | {'Bin':>{number_width}}"
            if f.additions or f.deletions:
                line += f" {f.deletions} -> {f.additions} bytes"
            lines.append(line)
            continue
        add, rem = f.additions, f.deletions
        if graph_width <= max_change:
            total = _scale(add + rem, graph_width, max_change)
            if total < 2 and add and rem:
                total = 2
            if add < rem:
                add = _scale(add, graph_width, max_change)
                rem = total - add
            else:
                rem = _scale(rem, graph_width, max_change)
                add = total - rem
        changed = f.additions + f.deletions
        graph = (" " if changed else "") + "+" * add + "-" * rem
        lines.append(f" {shown}{padding} | {changed:>{number_width}}{graph}")
    lines.append(
        _summary(len(files), sum(f.additions for f in text), sum(f.deletions for f in text))
    )
    return "\n".join(lines) + "\n"


def _digits(n: int) -> int:
    return len(str(n))


def _scale(it: int, width: int, max_change: int) -> int:
    """git's `scale_linear`: at least one column for any change."""
    return 0 if not it else 1 + it * (width - 1) // max_change


def _fit(name: str, width: int) -> str:
    """A name too long for `width`: `...` and its end, from a slash where one is left."""
    if len(name) <= width:
        return name
    keep = max(width - 3, 0)
    tail = name[len(name) - keep :] if keep else ""
    slash = tail.find("/")
    return "..." + (tail[slash:] if slash >= 0 else tail)


def _summary(files: int, added: int, removed: int) -> str:
    parts = [f" {files} file{'s' if files != 1 else ''} changed"]
    if added or not removed:
        parts.append(f"{added} insertion{'s' if added != 1 else ''}(+)")
    if removed or not added:
        parts.append(f"{removed} deletion{'s' if removed != 1 else ''}(-)")
    return ", ".join(parts)


def _print_name(f: StatFile) -> str:
    old, new = f.old_path, f.new_path
    if old is not None and new is not None and old != new:
        return _rename(old, new)
    path = new if new is not None else old
    assert path is not None
    return quote_path(path)


def _rename(a: str, b: str) -> str:
    """git's `pprint_rename`: `common/{old => new}/tail`, or both names whole when either needs
    quoting."""
    qa, qb = quote_path(a), quote_path(b)
    if qa != a or qb != b:
        return f"{qa} => {qb}"
    prefix = 0
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        if a[i] == "/":
            prefix = i + 1
        i += 1
    suffix = 0
    ia, ib = len(a) - 1, len(b) - 1
    back = 1 if prefix else 0
    while ia >= prefix - back and ib >= prefix - back and a[ia] == b[ib]:
        if a[ia] == "/":
            suffix = len(a) - ia
        ia -= 1
        ib -= 1
    a_mid = max(len(a) - prefix - suffix, 0)
    b_mid = max(len(b) - prefix - suffix, 0)
    middle = f"{a[prefix : prefix + a_mid]} => {b[prefix : prefix + b_mid]}"
    if prefix + suffix:
        return f"{a[:prefix]}{{{middle}}}{a[len(a) - suffix :]}"
    return middle
