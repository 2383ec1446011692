"""Paths as git prints them one to a line (`core.quotePath`, on by default): a name holding a
control character, a `"`, a backslash or any byte past ASCII is put in double quotes with C
escapes (`"new\\nline"`, `"caf\\303\\251"`), so that a name with a newline in it stays one line
and a name that is not UTF-8 reads the same everywhere."""

from __future__ import annotations

import os

# git's own escapes (`quote.c`); other bytes to escape are written in octal
_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 0x22: '"', 0x5C: "\\"}


def _plain(byte: int) -> bool:
    return 0x20 <= byte < 0x7F and byte not in _ESCAPES


def quote_path(path: str) -> str:
    """`path` (a name as `os.fsdecode` gives it) as git prints it."""
    raw = os.fsencode(path)
    if all(_plain(b) for b in raw):
        return path
    out = []
    for b in raw:
        if _plain(b):
            out.append(chr(b))
        elif b in _ESCAPES:
            out.append("\\" + _ESCAPES[b])
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'
