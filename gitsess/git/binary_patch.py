"""git's binary patch of a whole file ("GIT binary patch" / "literal N"), written in parts.

libgit2 makes these from blobs held in memory; a file too big to hold (see `diff.BIG_FILE`) is
deflated and base85-encoded here as it is read, straight into the patch being written.
`git apply` needs only the forward hunk; the reverse one git adds is optional.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable
from typing import BinaryIO

# git puts at most 52 bytes of deflated data on a line, led by a letter giving their number.
_LINE = 52
_LENGTHS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def write_literal(out: BinaryIO, size: int, chunks: Iterable[bytes]) -> None:
    """Write the forward hunk giving the whole new content (`size` bytes, from `chunks`)."""
    out.write(b"GIT binary patch\nliteral %d\n" % size)
    deflate = zlib.compressobj()
    pending = b""
    for chunk in chunks:
        pending += deflate.compress(chunk)
        pending = _write_lines(out, pending)
    pending += deflate.flush()
    rest = _write_lines(out, pending)
    if rest:
        out.write(_line(rest))
    out.write(b"\n")


def _write_lines(out: BinaryIO, data: bytes) -> bytes:
    """Write every full line of `data`; return what is left for the next."""
    whole = len(data) - len(data) % _LINE
    out.writelines(_line(data[i : i + _LINE]) for i in range(0, whole, _LINE))
    return data[whole:]


def _line(data: bytes) -> bytes:
    return _LENGTHS[len(data) - 1 : len(data)] + base64.b85encode(data, pad=True) + b"\n"
