"""A session's HEAD resolved as git does, and the real repository's refs, from files alone.

Apart from `session_refs.py` (which needs pygit2 for its walks) because the view's daemon reads
HEAD when a git inside first writes its index (`overlay/gitunit.py`): loading pygit2 there
cost a session's first `git status` some 60 ms; and `ls` tells from these whether what it
last counted of a session's own commits still holds (`services/counts.py`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


def real_refs(common: Path) -> dict[str, str]:
    """The tips of the branches, tags and remote-tracking branches of the repository whose
    common dir is `common`, read from its files (loose refs over packed-refs): from inside a
    session, where libgit2 would resolve the path to the view's own `.git`, too."""
    refs = {
        name: oid
        for name, oid in parse_packed_refs(_read(common / "packed-refs")).items()
        if name.startswith(_REAL_REFS)
    }
    for top in _REAL_REFS:
        base = common / top
        for folder, _, names in os.walk(base):
            for name in names:
                if name.endswith(".lock"):
                    continue
                path = Path(folder) / name
                text = (_read(path) or b"").decode("utf-8", "surrogateescape").strip()
                if HEX_ID.fullmatch(text):
                    refs[path.relative_to(common).as_posix()] = text
    return refs


_REAL_REFS = ("refs/heads/", "refs/tags/", "refs/remotes/")


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
