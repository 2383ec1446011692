"""Git's wildmatch: a glob of pathspecs and ignore rules as a regular expression."""

from __future__ import annotations

import re


def wildmatch_regex(pattern: str) -> str:
    """A regex (for `fullmatch`) equivalent to git's wildmatch with WM_PATHNAME."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            starts = i == 0 or pattern[i - 1] == "/"
            if j - i >= 2 and starts and j == n:
                out.append(".*")
            elif j - i >= 2 and starts and pattern[j] == "/":
                out.append("(?:.*/)?")
                j += 1  # the slash is part of "**/", which also matches no directory
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            cls, i = _bracket(pattern, i)
            if cls is None:
                return "(?!)"  # an unterminated bracket makes wildmatch fail everything
            out.append(cls)
            continue
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _bracket(pattern: str, start: int) -> tuple[str | None, int]:
    """Translate the bracket expression at `start`; returns (regex, index after it)."""
    i = start + 1
    n = len(pattern)
    negate = i < n and pattern[i] in "!^"
    if negate:
        i += 1
    parts: list[str] = []
    first = True
    while i < n and (pattern[i] != "]" or first):
        first = False
        c = pattern[i]
        if c == "[" and pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end > 0 else ""
            if name in _POSIX_CLASSES:
                parts.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
        if c == "\\" and i + 1 < n:
            i += 1
            c = pattern[i]
        if i + 2 < n and pattern[i + 1] == "-" and pattern[i + 2] != "]":
            hi = pattern[i + 2]
            if hi == "\\" and i + 3 < n:
                hi = pattern[i + 3]
                i += 1
            parts.append(f"{re.escape(c)}-{re.escape(hi)}")
            i += 3
            continue
        parts.append(re.escape(c))
        i += 1
    if i >= n:
        return None, n
    body = "".join(parts)
    # a bracket never matches "/" under WM_PATHNAME
    return ("(?!/)" + (f"[^{body}]" if negate else f"[{body}]")), i + 1
