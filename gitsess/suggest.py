"""A "did you mean" hint for a mistyped session or command name, by edit distance."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A hint naming the candidates within a small edit distance of `word` (empty if none)."""
    # A third of the word's length, at least one edit: "fix-logn" finds "fix-login", "a" finds
    # nothing much longer.
    limit = max(1, len(word) // 3)
    close = sorted(
        (d, c) for c in candidates if (d := edit_distance(word, c)) <= limit and c != word
    )
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for _, c in close[:3]) + "?"


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions of one character."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
