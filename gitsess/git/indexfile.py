"""git's index file (`.git/index`, versions 2 to 4), read and given a new fsmonitor extension.

The standard library alone, and `_indexsweep.c`: the view's daemon uses it to present a
session's first index (`overlay/index_view.py`) and must not load pygit2 for that. Only SHA-1
repositories, and no split or sparse index: for anything else `parse` says None and the caller
leaves the file as is. The entries themselves are read in C only (`_indexsweep`: where they
end, their paths, the sweep of the worktree against them): 5,000 of them took 10 ms of Python
and of the daemon's GIL, on the first status's path.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property

from gitsess.git import _indexsweep

HASH = 20  # SHA-1
# Dropped from a presented index: the fsmonitor state it replaces, and the offset tables that
# only speed reading up (they would need recomputing). A split (`link`) or sparse (`sdir`)
# index is not presented at all.
_DROPPED = (b"FSMN", b"EOIE", b"IEOT")
_UNTR = b"UNTR"
_STAT = struct.Struct(">9I")  # a directory's stat data in the untracked cache
_EWAH_HEAD = struct.Struct(">II")
_REFUSED = (b"link", b"sdir")


@dataclass(frozen=True)
class Index:
    data: bytes  # the whole file
    end_of_entries: int
    extensions: list[tuple[bytes, int, int]]  # signature, start (at the signature), end

    @cached_property
    def paths(self) -> list[bytes]:
        """Its entries' paths, read once (2 ms of 5,000 entries, with the GIL)."""
        found = _indexsweep.paths(self.data)
        if found is None:  # (`parse` read the entries, by the same walk)
            raise ValueError("the index's entries cannot be read")
        return found


def parse(data: bytes) -> Index | None:
    """Where the entries of an index file end, and its extensions; None for what this module
    does not read (another version, another hash, a split or sparse index, a bad checksum,
    entries cut short)."""
    if len(data) < 12 + HASH or data[:4] != b"DIRC":
        return None
    version = struct.unpack_from(">I", data, 4)[0]
    if version not in (2, 3, 4) or hashlib.sha1(data[:-HASH]).digest() != data[-HASH:]:
        return None
    off = _indexsweep.entries_end(data)
    if off is None:
        return None
    extensions = []
    start = off
    while off < len(data) - HASH:
        if off + 8 > len(data) - HASH:
            return None
        sig, size = data[off : off + 4], struct.unpack_from(">I", data, off + 4)[0]
        if sig in _REFUSED or off + 8 + size > len(data) - HASH:
            return None
        extensions.append((sig, off, off + 8 + size))
        off += 8 + size
    return Index(data, start, extensions)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """git's offset varint (`decode_varint`): each continued byte adds one."""
    byte = data[at]
    value = byte & 0x7F
    at += 1
    while byte & 0x80:
        byte = data[at]
        value = ((value + 1) << 7) | (byte & 0x7F)
        at += 1
    return value, at


@dataclass(frozen=True)
class Untracked:
    """git's untracked cache (the `UNTR` extension): where its ident is, and each directory
    it holds with the stat data it last saw the directory with (None: not valid)."""

    ident: bytes
    ident_end: int  # offset in the extension's body of what follows the ident
    dirs: list[tuple[bytes, tuple[int, ...] | None]]  # path ("" or "a/b/"), stat data


def untracked(index: Index) -> Untracked | None:
    """The index's untracked cache, None if it has none (or one this module cannot read)."""
    data = index.data
    ext = next(((s, e) for sig, s, e in index.extensions if sig == _UNTR), None)
    if ext is None:
        return None
    body, end = ext[0] + 8, ext[1]
    try:
        size, at = _varint(data, body)
        ident = data[at : at + size]
        ident_end = at + size - body
        at += size + 2 * _STAT.size + 4 + 2 * HASH
        at = data.index(b"\0", at, end) + 1  # exclude_per_dir
        count, at = _varint(data, at)
        if count == 0:  # made, not filled yet
            return Untracked(ident, ident_end, [])
        paths: list[bytes] = []
        at = _read_dirs(data, at, end, b"", paths)
        if len(paths) != count:
            return None
        valid, at = _ewah_bits(data, at)
        _, at = _ewah_bits(data, at)  # check_only
        _, at = _ewah_bits(data, at)  # sha1_valid
        stats: dict[int, tuple[int, ...]] = {}
        for i in valid:
            stats[i] = _STAT.unpack_from(data, at)
            at += _STAT.size
    except (struct.error, ValueError, IndexError):
        return None
    return Untracked(ident, ident_end, [(p, stats.get(i)) for i, p in enumerate(paths)])


def _read_dirs(data: bytes, at: int, end: int, parent: bytes, paths: list[bytes]) -> int:
    """One directory of the untracked cache and those below it, in git's order (preorder)."""
    untracked_nr, at = _varint(data, at)
    dirs_nr, at = _varint(data, at)
    eos = data.index(b"\0", at, end)
    name = data[at:eos]
    path = parent + name + b"/" if name else parent
    paths.append(path)
    at = eos + 1
    for _ in range(untracked_nr):
        at = data.index(b"\0", at, end) + 1
    for _ in range(dirs_nr):
        at = _read_dirs(data, at, end, path, paths)
    return at


def _ewah_bits(data: bytes, at: int) -> tuple[list[int], int]:
    """The set bits of a serialized EWAH bitmap (git's `ewah_read_mmap`), and where it ends."""
    _, words = _EWAH_HEAD.unpack_from(data, at)
    at += 8
    values = struct.unpack_from(f">{words}Q", data, at)
    at += 8 * words + 4
    bits: list[int] = []
    pos = i = 0
    while i < words:
        marker = values[i]
        run, literals = (marker >> 1) & 0xFFFFFFFF, marker >> 33
        if marker & 1:
            bits.extend(range(pos * 64, (pos + run) * 64))
        pos += run
        for word in values[i + 1 : i + 1 + literals]:
            bits.extend(pos * 64 + b for b in range(64) if word >> b & 1)
            pos += 1
        i += 1 + literals
    return bits, at


def with_fsmonitor(index: Index, token: str, moved: tuple[Untracked, bytes] | None = None) -> bytes:
    """The index's file with an fsmonitor extension (version 2) naming `token` and no entry
    dirty, so that git asks the hook what changed since `token` and trusts the rest; the offset
    tables dropped (see `_DROPPED`). The untracked cache names where it was made: `moved` (the
    cache, its new ident) keeps it, as made elsewhere, else it is dropped (git would drop it
    there)."""
    data = index.data
    out = bytearray(data[: index.end_of_entries])
    for sig, start, end in index.extensions:
        if sig == _UNTR:
            if moved is not None:
                cache, ident = moved
                rest = data[start + 8 + cache.ident_end : end]
                body = _encode_varint(len(ident)) + ident + rest
                out += _UNTR + struct.pack(">I", len(body)) + body
        elif sig not in _DROPPED:
            out += data[start:end]
    # An empty EWAH bitmap as git writes one: no bits, one (empty) run-length word.
    ewah = struct.pack(">IIQI", 0, 1, 0, 0)
    body = struct.pack(">I", 2) + token.encode() + b"\0" + struct.pack(">I", len(ewah)) + ewah
    out += b"FSMN" + struct.pack(">I", len(body)) + body
    out += hashlib.sha1(out).digest()
    return bytes(out)


def _encode_varint(value: int) -> bytes:
    """git's offset varint (`encode_varint`), the inverse of `_varint`."""
    out = [value & 0x7F]
    value >>= 7
    while value:
        value -= 1
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def fsmonitor_token(index: Index) -> str | None:
    """The token of the index's fsmonitor extension (version 2), None if it has none."""
    data = index.data
    ext = next(((s, e) for sig, s, e in index.extensions if sig == b"FSMN"), None)
    if ext is None:
        return None
    body = data[ext[0] + 8 : ext[1]]
    if len(body) < 4 or struct.unpack_from(">I", body)[0] != 2:
        return None
    end = body.find(b"\0", 4)
    return body[4:end].decode("utf-8", "surrogateescape") if end >= 0 else None
