"""durable.write_aside: a file written whole or not at all, on a real file system."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gitsess import durable


def test_the_new_file_replaces_the_old_one_whole(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with durable.write_aside(target, durable=True) as f:
        f.write(b"new ")
        assert target.read_bytes() == b"old"  # nothing shows until the block ends
        f.write(b"content")
    assert target.read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["f"]


def test_an_error_in_the_block_leaves_the_old_file_and_no_aside(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), durable.write_aside(target) as f:
        f.write(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_mode_is_exact_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        with durable.write_aside(tmp_path / "hook", 0o755) as f:
            f.write(b"#!/bin/sh\n")
        with durable.write_aside(tmp_path / "plain") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "hook").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o600  # 0o666 less the umask


def test_the_aside_name_names_its_writer(tmp_path: Path) -> None:
    aside = durable.aside_name(str(tmp_path / "a b.txt"))
    assert Path(aside).parent == tmp_path and Path(aside).name.startswith(".a b.txt.")
    assert durable.aside_writer(Path(aside).name) == os.getpid()
    assert durable.aside_writer(os.fsencode(Path(aside).name)) == os.getpid()
    assert durable.aside_writer("a b.txt") is None
    assert durable.aside_writer(".x.gitsess-12.tmp.orig") is None
