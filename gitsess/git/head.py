"""A session's HEAD resolved as git does, from its files alone.

Apart from `session_refs.py` (which needs pygit2 for its walks) because the view's daemon reads
HEAD when a git inside first writes its index (`overlay/gitunit.py`): loading pygit2 there
cost a session's first `git status` some 60 ms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gitsess.errors import GitsessError

# git's own limit (SYMREF_MAXDEPTH) is 5: deeper chains are loops or nonsense
_MAX_SYMREF_DEPTH = 5
HEX_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class SessionHead:
    branch: str | None  # "refs/heads/x", or None when HEAD is detached
    commit: str | None  # hex id, None on an unborn branch


def read_head(read: Callable[[str], bytes | None]) -> SessionHead:
    """Resolve the session's HEAD as git does; `read(rel)` gives a file below its `.git`.

    A chain of symbolic refs is followed to its end, and `branch` names that last ref: a commit
    on HEAD moves that one. A branch with neither a loose nor a packed ref is unborn.
    """
    data = read("HEAD")
    if data is None:
        raise GitsessError("the session's .git has no HEAD")
    target = _parse_ref_file(data, "HEAD")
    if not target.startswith("ref:"):
        return SessionHead(None, target)
    packed: dict[str, str] | None = None
    name = _symref_target(target, "HEAD")
    for _ in range(_MAX_SYMREF_DEPTH):
        loose = read(name)
        if loose is None:
            if packed is None:
                packed = parse_packed_refs(read("packed-refs"))
            return SessionHead(name, packed.get(name))
        value = _parse_ref_file(loose, name)
        if not value.startswith("ref:"):
            return SessionHead(name, value)
        name = _symref_target(value, name)
    raise GitsessError(f"the session's HEAD is a chain of more than {_MAX_SYMREF_DEPTH} refs")


def _parse_ref_file(data: bytes, name: str) -> str:
    text = data.decode("utf-8", "surrogateescape").rstrip("\n")
    if text.startswith("ref:"):
        return text
    if "\n" in text or not HEX_ID.fullmatch(text):
        raise GitsessError(f"malformed {name} in the session's .git: {text[:80]!r}")
    return text


def _symref_target(value: str, name: str) -> str:
    target = value[len("ref:") :].strip()
    # the name becomes a path below .git: nothing may climb out of refs/
    parts = target.split("/")
    if (
        not target.startswith("refs/")
        or any(part in ("", ".", "..") for part in parts)
        or any(c in target for c in "\n\\\0")
    ):
        raise GitsessError(f"malformed {name} in the session's .git: {value[:80]!r}")
    return target


def parse_packed_refs(data: bytes | None) -> dict[str, str]:
    refs: dict[str, str] = {}
    if data is None:
        return refs
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        if not line or line.startswith(("#", "^")):
            continue
        oid, _, name = line.partition(" ")
        if HEX_ID.fullmatch(oid) and name:
            refs[name] = oid
    return refs
