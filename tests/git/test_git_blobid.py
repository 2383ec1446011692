from __future__ import annotations

import io
import os
from pathlib import Path

import pygit2
import pytest

from gitsess.git.blobid import blob_id, file_blob_id, stream_blob_id
from gitsess.git.scratch import scratch_repo
from tests.util import git


@pytest.mark.parametrize("size", [0, 1, 55, 56, 64, 4096, (1 << 20) + 3, (3 << 20) + 1])
def test_ids_are_those_git_gives(tmp_path: Path, size: int) -> None:
    git(tmp_path, "init", "-q")
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    expected = git(tmp_path, "hash-object", "f").strip()
    assert str(blob_id(data)) == expected
    assert str(file_blob_id(str(tmp_path / "f"))) == expected
    assert blob_id(data) == pygit2.hash(data)


def test_a_stream_shorter_than_its_size_is_an_error() -> None:
    with pytest.raises(OSError, match="f shrank while it was read"):
        stream_blob_id(io.BytesIO(b"x" * 50), 100, "f")


def test_a_stream_longer_than_its_size_is_hashed_up_to_it() -> None:
    assert stream_blob_id(io.BytesIO(b"abcdef"), 3, "f") == blob_id(b"abc")


@pytest.mark.parametrize("packed", [True, False])
def test_kept_blobs_are_read_from_memory_before_the_object_store(
    repo_dir: Path, packed: bool
) -> None:
    """A diff reads the old side of a change from the bytes compute_changes kept, neither
    from a loose object nor by inflating a pack: the memory backend must come first."""
    repo = pygit2.Repository(str(repo_dir))
    had = repo.create_blob(b"git has this\n")
    if packed:
        git(repo_dir, "repack", "-adq")
    with scratch_repo(repo) as scratch:
        assert scratch.create_blob(b"git has this\n") == had
        new = scratch.create_blob(b"new\n")
        # a stand-in the object store cannot hold: only a read from memory shows it (a blob
        # lookup takes the first backend that has the object, as a diff's does)
        scratch._memory.kept[had] = b"from memory\n"
        old_blob, new_blob = scratch[had], scratch[new]
        assert isinstance(old_blob, pygit2.Blob) and isinstance(new_blob, pygit2.Blob)
        patch = old_blob.diff(new_blob)
        assert "-from memory" in (patch.text or "")
