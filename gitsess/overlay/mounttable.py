"""The kernel's table of mounts, as this process's mount namespace sees it.

Read from the table, never by asking the mount point itself: a view whose daemon is stuck
would hang the asker, and one whose daemon is gone answers ENOTCONN.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

MOUNTINFO = "/proc/self/mountinfo"

# The table writes space, tab, newline and backslash in a path as three octal digits.
_ESCAPE = re.compile(rb"\\([0-3][0-7]{2})")


class Mount(NamedTuple):
    point: str
    device: str  # "major:minor"
    fstype: str


def mounts(table: str = MOUNTINFO) -> list[Mount]:
    """Every mount, in the order they were made (so the last at a point is the topmost); of
    another process's mount namespace with its /proc/PID/mountinfo."""
    with open(table, "rb") as f:
        return [_parse(line) for line in f if line.strip()]


def _parse(line: bytes) -> Mount:
    # "id parent major:minor root point options [optional fields...] - fstype source super"
    head, _, tail = line.partition(b" - ")
    fields = head.split()
    return Mount(unescape(fields[4]), fields[2].decode(), tail.split()[0].decode())


def unescape(field: bytes) -> str:
    """A path as the table writes it, as the filesystem names it (bytes that are not UTF-8
    come back as os.fsdecode gives them)."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), field))


def device_at(point: str | Path) -> str | None:
    """The device of the topmost mount at `point`, None if nothing is mounted there."""
    target = str(point)
    found = None
    for m in mounts():
        if m.point == target:
            found = m.device
    return found


def is_mount_point(point: str | Path) -> bool:
    return device_at(point) is not None
