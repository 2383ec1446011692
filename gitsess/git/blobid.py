"""Git blob ids of the content on this machine, computed with OpenSSL's SHA-1.

libgit2 (as git) hashes with SHA1DC, which checks every block for the traces of a collision
attack; that makes it about five times slower than OpenSSL's SHA-1, which uses the CPU's SHA
instructions. Diff and apply name every changed file on both sides, the session's and the
worktree's: with SHA1DC that was some 15 % of `gitsess diff` of 1,000 files. The ids are the
same for all content but a crafted colliding pair, which git itself (`fsck`, transfers) still
refuses should one reach the repository.
"""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

import pygit2

# How much of a file too big to hold is read at once (hashed, copied, inflated).
CHUNK = 1 << 20


def blob_id(data: bytes) -> pygit2.Oid:
    sha = hashlib.sha1(b"blob %d\0" % len(data), usedforsecurity=False)
    sha.update(data)
    return pygit2.Oid(raw=sha.digest())


def file_blob_id(path: str) -> pygit2.Oid:
    """The id of the file's content, read in chunks: it may be too big to hold."""
    with open(path, "rb") as f:
        return stream_blob_id(f, os.fstat(f.fileno()).st_size, path)


def stream_blob_id(stream: BinaryIO, size: int, name: str) -> pygit2.Oid:
    """The id of the next `size` bytes of `stream`. A file that shrank since its size was
    taken raises OSError (as libgit2's `hashfile` does); one that grew is hashed up to `size`."""
    hashed = HashingReader(stream, size)
    left = size
    while left:
        chunk = hashed.read(min(left, CHUNK))
        if not chunk:
            raise OSError(f"{name} shrank while it was read")
        left -= len(chunk)
    oid = hashed.blob_id()
    assert oid is not None  # exactly `size` bytes were read
    return oid


class HashingReader:
    """Reads `stream` and hashes what it reads as the blob of `size` bytes it should be: a
    copy made in parts is checked against the id it was meant to have (`blob_id`, None when
    the stream did not hold `size` bytes)."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self._stream = stream
        self._sha = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
        self._left = size

    def read(self, size: int) -> bytes:
        data = self._stream.read(size)
        self._sha.update(data)
        self._left -= len(data)
        return data

    def blob_id(self) -> pygit2.Oid | None:
        return pygit2.Oid(raw=self._sha.digest()) if self._left == 0 else None
