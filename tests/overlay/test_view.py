"""`OverlayView`, the view diff and apply read without a mount, against the mount itself."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from gitsess.overlay.view import OverlayView
from tests.overlay.conftest import Mounted


def _all_paths(root: Path) -> set[str]:
    found: set[str] = set()
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(top, name), root))
    return {p for p in found if p.split("/")[0] != ".git"}


def test_is_dir_and_entry_agree_with_the_mount(mounted: Mounted) -> None:
    mnt = mounted.mnt
    shutil.rmtree(mnt / "src" / "pkg")  # a lower directory deleted
    (mnt / "src" / "pkg").write_text("a file where a directory was\n")
    os.remove(mnt / "README")
    (mnt / "README").mkdir()  # a directory where a file was
    (mnt / "README" / "inside").write_text("x\n")
    os.rename(mnt / "bin", mnt / "tools")  # a lower directory renamed
    (mnt / "new" / "deep").mkdir(parents=True)  # directories the session made
    os.symlink("tools", mnt / "to-dir")  # a symlink to a directory is not one
    (mnt / "src" / "main.py").write_text("changed\n")
    mounted.sync()
    seen = _all_paths(mnt)
    gone = {"bin", "bin/tool", "src/pkg/mod.py", "README/missing", ".git", ".git/HEAD"}
    with OverlayView(mounted.spec.session_dir / "delta.db", mounted.lower) as view:
        for path in sorted(seen | gone):
            try:
                mode: int | None = os.lstat(mnt / path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                mode = None
            if path.split("/")[0] == ".git":
                mode = None  # the view never reports git's own directory
            is_dir = mode is not None and stat.S_ISDIR(mode)
            entry = view.entry(path)
            assert view.is_dir(path) == is_dir, path
            assert (entry is not None and entry.kind == "dir") == is_dir, path
            assert (entry is None) == (mode is None), path
        assert view.is_dir("")


def test_a_session_over_a_removed_worktree_still_reads(mounted: Mounted) -> None:
    # `ls` counts what such a session holds; the view's name limit falls back to NAME_MAX.
    (mounted.mnt / "made").write_text("the session's own\n")
    os.remove(mounted.mnt / "README")
    mounted.unmount()
    shutil.rmtree(mounted.lower)
    with OverlayView(mounted.spec.session_dir / "delta.db", mounted.lower) as view:
        assert view.tree.name_max == 255
        assert sorted(view.touched_paths()) == ["README", "made"]
