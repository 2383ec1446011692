"""Writing many new objects into a repository as one pack, with no deltas.

An apply of a thousand files makes over a thousand new objects. Written loose, each is a file
of its own, deflated one after the other; git itself keeps a fetch of 100 objects or more as
a pack (`fetch.unpackLimit`). Here they go into one pack, deflated by one thread per CPU
(deflating is nearly all of the work). libgit2's pack builder searches every object for
deltas against its neighbours, which costs more than it saves here, so this writes the pack
format itself: version 2, every object whole and deflated, an index of version 2 beside it.

The pack is written under a temporary name and renamed, then its index: git and libgit2 find a
pack by its index, so a pack without one (a crash in between) is ignored and the next
`git gc` removes it.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pygit2

from gitsess.durable import fsync_dir

# Fewer objects than this are written loose (git's default `fetch.unpackLimit`).
MIN_OBJECTS = 100
# A pack with more raw bytes than this is not written here: its offsets could pass the 2 GiB
# that the index's table of 32-bit offsets holds, and the large-offset table is not written.
MAX_BYTES = 1 << 30
# Objects deflated per task of the thread pool.
_BATCH = 64

Entry = tuple[pygit2.Oid, int, bytes]  # id, object type (pygit2.enums.ObjectType), content


def fits(objects: Sequence[Entry]) -> bool:
    """Whether `objects` are for a pack (rather than loose files)."""
    return len(objects) >= MIN_OBJECTS and sum(len(data) for _, _, data in objects) <= MAX_BYTES


def write_pack(objects_dir: Path, objects: Sequence[Entry], fsync: bool) -> Path:
    """Write `objects` (see `fits`) as a pack and its index into `objects_dir`/pack; returns
    the index's path. With `fsync`, both files and the directory reach the disk first."""
    pack_dir = objects_dir / "pack"
    pack_dir.mkdir(exist_ok=True)
    with _temporary(pack_dir, fsync) as pack:
        found = _pack(pack, objects)
    name = pack_dir / f"pack-{pack.digest.hex()}"
    os.replace(pack.name, name.with_suffix(".pack"))
    with _temporary(pack_dir, fsync) as index:
        _index(index, found, pack.digest)
    os.replace(index.name, name.with_suffix(".idx"))
    if fsync:
        fsync_dir(pack_dir)
    return name.with_suffix(".idx")


class _Hashed:
    """A file being written, with the SHA-1 of all written so far (the pack's and the index's
    trailing checksum, `digest` once the file is done) and its length."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.name = f.name
        self.sha = hashlib.sha1(usedforsecurity=False)  # the formats' checksum
        self.offset = 0
        self.digest = b""

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.sha.update(data)
        self.offset += len(data)


@contextmanager
def _temporary(pack_dir: Path, fsync: bool) -> Iterator[_Hashed]:
    """A temporary file in `pack_dir`, read-only and ended by its checksum once the block is
    done; removed again when the block fails."""
    with tempfile.NamedTemporaryFile(dir=pack_dir, prefix="tmp_pack_", delete=False) as f:
        try:
            out = _Hashed(f)
            yield out
            out.digest = out.sha.digest()
            f.write(out.digest)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o444)
        except BaseException:
            os.unlink(f.name)
            raise


def _pack(out: _Hashed, objects: Sequence[Entry]) -> list[tuple[bytes, int, int]]:
    """The pack's body; returns (raw id, offset, CRC-32 of the stored object) per object.

    Deflating is nearly all of the time (zlib's fastest level, as git's default for loose
    objects), and zlib lets go of the GIL while it works: one thread per CPU deflates, a batch
    of objects at a time (a task per object cost as much in hand-offs as the threads saved)."""
    # Here, not at the top: every command that loads apply would load it (and logging).
    from concurrent.futures import ThreadPoolExecutor

    out.write(b"PACK" + struct.pack(">II", 2, len(objects)))
    found = []
    batches = [objects[i : i + _BATCH] for i in range(0, len(objects), _BATCH)]
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        for batch, stored in zip(batches, pool.map(_stored, batches), strict=True):
            for (oid, _, _), (body, crc) in zip(batch, stored, strict=True):
                found.append((oid.raw, out.offset, crc))
                out.write(body)
    return found


def _stored(batch: Sequence[Entry]) -> list[tuple[bytes, int]]:
    """Each object as the pack stores it (header, deflated content), with its CRC-32."""
    stored = []
    for _, kind, data in batch:
        body = _object_header(kind, len(data)) + zlib.compress(data, 1)
        stored.append((body, zlib.crc32(body)))
    return stored


def _object_header(kind: int, size: int) -> bytes:
    """Type and size: 3 bits of type and 4 of size, then 7 bits of size a byte, low first."""
    byte = (int(kind) << 4) | (size & 0x0F)
    size >>= 4
    header = bytearray()
    while size:
        header.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    header.append(byte)
    return bytes(header)


def _index(out: _Hashed, found: list[tuple[bytes, int, int]], pack_sha: bytes) -> None:
    """Version 2: fan-out table, sorted ids, their CRC-32s, their offsets, the pack's checksum."""
    entries = sorted(found)
    fanout = [0] * 256
    for raw, _, _ in entries:
        fanout[raw[0]] += 1
    for first in range(1, 256):
        fanout[first] += fanout[first - 1]
    out.write(b"\377tOc" + struct.pack(">I", 2))
    out.write(struct.pack(">256I", *fanout))
    out.write(b"".join(raw for raw, _, _ in entries))
    out.write(struct.pack(f">{len(entries)}I", *(crc for _, _, crc in entries)))
    out.write(struct.pack(f">{len(entries)}I", *(offset for _, offset, _ in entries)))
    out.write(pack_sha)
