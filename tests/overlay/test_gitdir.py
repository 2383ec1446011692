"""Where a view keeps its git state (`gitdir.linked_git`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsess.overlay.gitdir import linked_git


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
