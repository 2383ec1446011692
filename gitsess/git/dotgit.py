"""Which path names git refuses: its own `.git` in any spelling a filesystem may fold to it.

The rules of git's `verify_path` (read-cache.c, path.c), with `core.protectNTFS` and
`core.protectHFS` both on whatever the platform: a checkout of the tree may land on such a
filesystem (a shared or mounted disk), and a `.git` written as content is another repository's
configuration, whose `core.fsmonitor` or hooks the next `git status` there runs. Every place that
takes paths from elsewhere (pull, restore) or lays content out (apply) asks here.
"""

from __future__ import annotations

import os

# Code points HFS+ ignores when it compares names (git's `next_hfs_char`).
_HFS_IGNORED = frozenset(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def _name(part: str | bytes) -> bytes:
    return part if isinstance(part, bytes) else os.fsencode(part)


def is_dotgit(part: str | bytes) -> bool:
    """Whether one path component names git's directory on some filesystem: `.git` in any
    case, with NTFS's trailing dots and spaces, its short name `git~1` or an alternate data
    stream (`.git::$INDEX_ALLOCATION`), or HFS+'s ignorable code points (`.g\\u200cit`)."""
    name = _name(part)
    return any(_ntfs_dotgit(piece) for piece in name.split(b"\\")) or _hfs_dotgit(name)


def _ntfs_dotgit(name: bytes) -> bool:
    stem = name.split(b":", 1)[0].lower()
    for prefix in (b".git", b"git~1"):
        if stem.startswith(prefix) and not stem[len(prefix) :].strip(b" ."):
            return True
    return False


def _hfs_dotgit(name: bytes) -> bool:
    if not name or name[:1] not in (b".", b"\xe2", b"\xef"):
        return False  # (every ignorable code point starts with 0xe2 or 0xef in UTF-8)
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        return False  # malformed: HFS+ stores no such name, git's check stops there too
    folded = "".join(c for c in text if ord(c) not in _HFS_IGNORED)
    return folded.isascii() and folded.lower() == ".git"


def refused(path: str | bytes, *, symlink: bool = False) -> bool:
    """Whether git's `verify_path` refuses `path` (a repository-relative path as a tree or an
    index holds it): an empty, `.` or `..` component, or a `.git` in any spelling; for a
    symlink also a `.gitmodules` (git reads that file, and would follow the link)."""
    parts = _name(path).split(b"/")
    if any(p in (b"", b".", b"..") or is_dotgit(p) for p in parts):
        return True
    return symlink and _dotgitmodules(parts[-1])


def _dotgitmodules(name: bytes) -> bool:
    stem = name.split(b":", 1)[0].lower().rstrip(b" .")
    return stem in (b".gitmodules", b"gitmo~1")
