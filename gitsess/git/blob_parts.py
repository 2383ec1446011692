"""A blob's content read in parts, for blobs too big to hold.

libgit2 inflates a whole object into memory to read any of it. A loose object (where
`ScratchRepository.store_big` puts big blobs) is one zlib stream of "blob <size>\\0" and the
content, which is inflated here a part at a time. A packed blob is read whole, through libgit2.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import BinaryIO

import pygit2

from gitsess.git.blobid import CHUNK
from gitsess.git.repo import common_dir


def blob_parts(repo: pygit2.Repository, oid: str) -> Iterator[bytes]:
    """The content of blob `oid` of `repo`, a part (at most `CHUNK` bytes) at a time."""
    path = common_dir(repo) / "objects" / oid[:2] / oid[2:]
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the generator below)
    except FileNotFoundError:
        blob = repo.get(oid)
        if not isinstance(blob, pygit2.Blob):
            raise KeyError(oid) from None
        yield blob.data
        return
    with f:
        yield from _inflated(f, oid)


def _inflated(f: BinaryIO, oid: str) -> Iterator[bytes]:
    inflate = zlib.decompressobj()
    header = b""
    in_content = False
    while True:
        data = inflate.unconsumed_tail or f.read(CHUNK)
        if not data:
            break
        out = inflate.decompress(data, CHUNK)
        if not in_content:
            header += out
            if b"\0" not in header:
                continue
            kind, _, out = header.partition(b"\0")
            if not kind.startswith(b"blob "):
                raise KeyError(oid)
            in_content = True
        if out:
            yield out
    if not inflate.eof:
        raise OSError(f"loose object {oid} is truncated")
