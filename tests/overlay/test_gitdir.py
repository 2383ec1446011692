"""Where a view keeps its git state (`gitdir.linked_git`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.gitdir import MAIN, linked_git
from gitsess.overlay.tree import Tree
from gitsess.overlay.view import OverlayView
from tests.util import git, make_repo


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
    found, redirects = linked_git(os.fsencode(stand_in), str(session), writer=True)
    assert (found.dir, found.common, redirects) == (git_dir, common, {})
    assert found.head_file == git_dir + b"/HEAD" and found.index_file == git_dir + b"/index"


def _listed(session: Path) -> dict[str, bytes | None]:
    """Every name below the session dir, with a symlink's target (delta.db's own files left
    out: opening it is SQLite's)."""
    return {
        str(p.relative_to(session)): os.readlink(p).encode() if p.is_symlink() else None
        for p in session.rglob("*")
        if not p.name.startswith("delta.db")
    }


@pytest.mark.parametrize("linked", [False, True], ids=["main", "linked"])
def test_a_reader_writes_nothing_in_the_session_dir_a_writer_makes_it(
    tmp_path: Path, linked: bool
) -> None:
    """A reader (`OverlayView`: `gitsess diff` beside a daemon) over a session dir whose git
    files and object store are missing leaves it as it was; a writer makes them."""
    repo = make_repo(tmp_path / "repo")
    worktree = repo
    if linked:
        worktree = tmp_path / "linked"
        git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    session = tmp_path / "session"
    session.mkdir()
    DeltaStore(str(session / "delta.db")).close()
    before = _listed(session)
    with OverlayView(session / "delta.db", worktree) as view:
        assert view.git == MAIN  # (a linked worktree's files not made yet: read as a main one)
    assert _listed(session) == before
    store = DeltaStore(str(session / "delta.db"))
    try:
        tree = Tree(store, str(worktree), set())
        tree.close()
    finally:
        store.close()
    made = set(_listed(session)) - set(before)
    assert {"objects", "objects/info/alternates", "objects-link", "lower/objects"} <= made
    assert ({"dotgit", "commondir"} <= made) == linked
    with OverlayView(session / "delta.db", worktree) as view:
        assert (view.git != MAIN) == linked  # now found made
