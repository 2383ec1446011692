"""Which object store a view path lies below (`gitdir.object_store`), asked several times for
each request below `.git`, and what the view decides from it (`passthrough`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsess.overlay import passthrough as pt
from gitsess.overlay.gitdir import GIT_COMMON, GIT_OBJECTS, linked_git, object_store


@pytest.mark.parametrize(
    ("rel", "store"),
    [
        (b".git/objects/9c/0123456789012345678901234567890123456789", GIT_OBJECTS),
        (b".git/objects/pack", GIT_OBJECTS),
        (b".git/objects/", GIT_OBJECTS),
        (b".GIT/objects/9c/tmp_obj_AbCdEf", GIT_COMMON + b"/objects"),
        # the store itself is not below itself, nor is a name it only begins
        (b".git/objects", None),
        (b".git/objectsx/9c", None),
        (b".GIT/objects", None),
        (b".GIT/objectsx/9c", None),
        (b".git/refs/heads/main", None),
        (b"src/.git/objects/9c", None),
        (b"", None),
        (None, None),
    ],
)
def test_the_object_store_a_path_lies_below(rel: bytes | None, store: bytes | None) -> None:
    assert object_store(rel) == store


def test_what_the_view_decides_from_it() -> None:
    fanout = b".git/objects/9c"
    assert pt.in_object_store(fanout) and pt.in_object_store(GIT_OBJECTS)
    assert not pt.without_loose_objects(fanout)
    assert pt.without_loose_objects(b".git/objects/pack")
    assert pt.without_loose_objects(b".GIT/objects/info")
    assert pt.listed_by_git(b".git/objects/pack") and not pt.listed_by_git(fanout)
    assert pt.lasting(fanout + b"/0123456789012345678901234567890123456789")
    assert pt.lasting(b".git/objects/pack/pack-1234.idx")
    assert not pt.lasting(b".git/index") and not pt.lasting(b"src/objects/9c/0123")


@pytest.mark.parametrize(
    ("files", "git_dir", "common"),
    [
        ({}, b".git", b".git"),
        ({"dotgit": b"gitdir: /m/mnt/.GIT/worktrees/wt\n"}, b".GIT/worktrees/wt", b".GIT"),
        # a session made before git's layout: its common dir below the admin dir
        ({"commondir": b"common\n"}, b".git", b".git/common"),
        ({"commondir": b"/m/mnt/.git/common\n"}, b".git", b".git/common"),
    ],
    ids=["main", "linked", "before-unmounted", "before-mounted"],
)
def test_the_layout_of_a_session_over_a_stand_in_is_the_one_it_recorded(
    tmp_path: Path, files: dict[str, bytes], git_dir: bytes, common: bytes
) -> None:
    """A worktree that is gone leaves its session over a stand-in with no `gitdir:` file: the
    layout comes from the session's own files (the archive of its commits reads it)."""
    stand_in, session = tmp_path / "stand-in", tmp_path / "session"
    stand_in.mkdir()
    session.mkdir()
    for name, text in files.items():
        (session / name).write_bytes(text)
    found, redirects = linked_git(os.fsencode(stand_in), str(session))
    assert (found.dir, found.common, redirects) == (git_dir, common, {})
    assert found.head_file == git_dir + b"/HEAD" and found.index_file == git_dir + b"/index"
