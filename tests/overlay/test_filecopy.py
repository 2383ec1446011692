"""Copies of files: content and holes kept, no symlink followed, no fifo waited on."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gitsess.overlay.filecopy import copy_file, copy_open_file


def test_a_copy_has_the_content_and_keeps_holes(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    with open(src, "wb") as f:
        f.write(b"head")
        f.seek(64 << 20)
        f.write(b"tail")
    copy_file(str(src), str(dest))
    assert dest.read_bytes() == src.read_bytes()
    # (64 MiB of hole: a copy that wrote zeros would allocate them)
    assert os.stat(dest).st_blocks * 512 < 1 << 20


def test_a_copy_follows_no_symlink_and_waits_on_no_fifo(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"not to be copied")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError) as e:
        copy_file(str(tmp_path / "link"), str(tmp_path / "dest"))
    assert e.value.errno == errno.ELOOP
    assert not (tmp_path / "dest").exists()
    copy_file(str(tmp_path / "fifo"), str(tmp_path / "dest"))  # (returns: no writer awaited)
    assert (tmp_path / "dest").read_bytes() == b""


def test_an_open_file_is_copied_from_its_descriptor(tmp_path: Path) -> None:
    src, content = tmp_path / "src", os.urandom(300_000)
    src.write_bytes(content)
    fd = os.open(src, os.O_RDONLY)
    try:
        src.unlink()  # (the descriptor's file, whatever the name says now)
        copy_open_file(fd, str(tmp_path / "dest"))
    finally:
        os.close(fd)
    assert (tmp_path / "dest").read_bytes() == content
