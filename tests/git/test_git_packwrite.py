"""A pack written by gitsess is one git accepts whole: `verify-pack`, `fsck`, every object."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import ObjectType

from gitsess.git import packwrite
from tests.util import git

from .helpers import copy_repo, sample_repo


def _blobs(count: int) -> list[packwrite.Entry]:
    """Blobs of every header length: empty, under 16 bytes, a few KiB, and over 2 MiB."""
    rng = random.Random(5)
    sizes = [0, 1, 15, 16, 127, 2048, 2**21 + 3] + [rng.randrange(1, 40_000) for _ in range(count)]
    datas = [
        rng.randbytes(size) if i % 2 else b"line\n" * (size // 5) for i, size in enumerate(sizes)
    ]
    return [(pygit2.hash(data), ObjectType.BLOB, data) for data in datas]


def test_a_pack_of_blobs_a_tree_and_a_commit_is_whole(tmp_path: Path) -> None:
    repo_dir = sample_repo(tmp_path / "repo")
    repo = pygit2.Repository(str(repo_dir))
    blobs = _blobs(120)
    # The tree and commit are made in a scratch object store, as apply makes them: a copy, so
    # that the commit's parent is there (two repositories made apart can differ in a second).
    scratch = pygit2.Repository(str(copy_repo(repo_dir, tmp_path / "scratch")))
    builder = scratch.TreeBuilder()
    for i, (oid, _, data) in enumerate(blobs):
        assert scratch.create_blob(data) == oid
        builder.insert(f"f{i}", oid, pygit2.enums.FileMode.BLOB)
    tree = builder.write()
    sig = pygit2.Signature("T", "t@example.com", 1_700_000_000, 0)
    commit = scratch.create_commit(None, sig, sig, "packed\n", tree, [repo.head.target])
    objects = [*blobs]
    for oid in (tree, commit):
        obj = scratch.odb.read(oid)
        objects.append((oid, obj[0], obj[1]))
    assert packwrite.fits(objects)

    idx = packwrite.write_pack(repo_dir / ".git" / "objects", objects, fsync=True)

    assert idx.exists() and idx.with_suffix(".pack").exists()
    assert not [p for p in idx.parent.iterdir() if p.name.startswith("tmp_pack_")]
    assert git(repo_dir, "verify-pack", "-v", str(idx)).strip().endswith(": ok")
    git(repo_dir, "update-ref", "refs/heads/packed", str(commit))
    git(repo_dir, "fsck", "--full", "--strict", "--no-dangling")
    fresh = pygit2.Repository(str(repo_dir))
    for oid, kind, data in objects:
        assert fresh.odb.read(oid) == (kind, data)


def test_few_or_huge_object_sets_are_not_for_a_pack() -> None:
    blob = (pygit2.hash(b"x"), ObjectType.BLOB, b"x")
    assert not packwrite.fits([blob] * (packwrite.MIN_OBJECTS - 1))
    assert packwrite.fits([blob] * packwrite.MIN_OBJECTS)
    big = (blob[0], ObjectType.BLOB, b"\0" * (packwrite.MAX_BYTES // 2 + 1))
    assert not packwrite.fits([big, big] + [blob] * packwrite.MIN_OBJECTS)


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    repo_dir = sample_repo(tmp_path / "repo")
    pack_dir = repo_dir / ".git" / "objects" / "pack"
    before = sorted(os.listdir(pack_dir)) if pack_dir.exists() else []
    broken = [*_blobs(100), (pygit2.hash(b"y"), ObjectType.BLOB, "not bytes")]
    with pytest.raises(TypeError):
        packwrite.write_pack(repo_dir / ".git" / "objects", broken, fsync=False)  # type: ignore[arg-type]
    assert sorted(os.listdir(pack_dir)) == before
