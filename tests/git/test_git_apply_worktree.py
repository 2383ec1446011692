from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from gitsess.git.apply_worktree import WorktreeResult, apply_worktree
from gitsess.git.changes import compute_changes
from gitsess.git.view import Entry
from tests.util import git, write

from .dirview import DirView
from .helpers import copy_repo, tree_state


def apply(
    repo_dir: Path, view: DirView, *specs: str, force: bool = False, dry_run: bool = False,
    ignored: bool = False,
) -> WorktreeResult:  # fmt: skip
    repo = pygit2.Repository(str(repo_dir))
    changes = compute_changes(view, repo, pathspecs=specs, include_ignored=ignored)
    return apply_worktree(repo, view, changes, force=force, dry_run=dry_run)


def edit(root: Path) -> None:
    (root / "src/main.py").write_text("rewritten\n")
    (root / "run.sh").chmod(0o600)
    (root / "README.md").unlink()
    (root / "link").unlink()
    (root / "link").symlink_to("docs")
    shutil.rmtree(root / "docs")
    (root / "docs").write_text("docs is a file now\n")
    (root / "src/util.py").unlink()
    (root / "src/util.py").mkdir()
    write(root, "src/util.py/__init__.py", "")
    (root / "bin").rename(root / "binaries")
    (root / "empty/deeper").mkdir(parents=True)
    (root / "empty").chmod(0o750)
    write(root, "new.bin", bytes(range(256)) * 3, mode=0o755)


def test_worktree_becomes_the_view(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    result = apply(repo_dir, view)
    assert result.ok and not result.dry_run
    assert "docs/guide.txt" in result.applied and "binaries/blob.bin" in result.applied
    assert tree_state(repo_dir) == tree_state(view.root)
    # nothing left to apply
    assert compute_changes(view, pygit2.Repository(str(repo_dir))).changes == ()


def test_dry_run_changes_nothing(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    before = tree_state(repo_dir)
    result = apply(repo_dir, view, dry_run=True)
    assert result.ok and result.dry_run and "src/main.py" in result.applied
    assert tree_state(repo_dir) == before


def test_refuses_everything_when_real_file_changed(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    (repo_dir / "src/main.py").write_text("edited outside the session\n")
    os.utime(repo_dir / "src/main.py", ns=(1, 1))  # a different mtime even on coarse clocks
    write(repo_dir, "new.bin", "someone else made this\n")
    before = tree_state(repo_dir)
    result = apply(repo_dir, view)
    assert not result.ok and result.applied == ()
    reasons = {c.path: c.reason for c in result.conflicts}
    assert reasons == {"src/main.py": "worktree-changed", "new.bin": "worktree-exists"}
    assert tree_state(repo_dir) == before
    # dry run reports the same
    assert apply(repo_dir, view, dry_run=True).conflicts == result.conflicts
    forced = apply(repo_dir, view, force=True)
    assert forced.ok
    assert tree_state(repo_dir) == tree_state(view.root)


def test_deleted_directory_with_new_real_file_conflicts(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    shutil.rmtree(view.root / "docs")
    write(repo_dir, "docs/added-outside.txt", "precious\n")
    os.utime(repo_dir / "docs", ns=(1, 1))
    result = apply(repo_dir, view)
    assert [c.path for c in result.conflicts] == ["docs", "docs/added-outside.txt"]
    assert (repo_dir / "docs/added-outside.txt").read_text() == "precious\n"


def test_pathspec_applies_a_subset(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    result = apply(repo_dir, view, "src")
    assert set(result.applied) == {"src/main.py", "src/util.py", "src/util.py/__init__.py"}
    assert (repo_dir / "src/main.py").read_text() == "rewritten\n"
    assert (repo_dir / "README.md").exists()
    assert git(repo_dir, "status", "--porcelain", "--", "docs", "README.md") == ""


def test_ignored_files_stay_and_block_only_what_they_must(repo_dir: Path, tmp_path: Path) -> None:
    write(repo_dir, "docs/notes.log", "ignored, untracked\n")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    shutil.rmtree(view.root / "docs")
    result = apply(repo_dir, view)
    # the tracked file goes; the directory stays because the ignored file is not applied
    assert result.ok and result.applied == ("docs/guide.txt",) and result.skipped == ("docs",)
    assert [p.name for p in (repo_dir / "docs").iterdir()] == ["notes.log"]
    view.refresh(result.changed_dirs)
    assert "docs" in result.changed_dirs
    (view.root / "docs").write_text("a file where the directory was\n")
    blocked = apply(repo_dir, view)
    assert [(c.path, c.reason) for c in blocked.conflicts] == [("docs", "not-empty")]
    assert apply(repo_dir, view, ignored=True).ok
    assert tree_state(repo_dir) == tree_state(view.root)


class _RenameRecords(DirView):
    """Reports a renamed file's origin as the record of its new name, as the overlay does."""

    def __init__(self, root: Path, worktree: Path, origins: dict[str, str]) -> None:
        super().__init__(root, worktree)
        self.origins = origins

    def copied_from(self, path: str) -> Entry | None:
        return super().copied_from(self.origins.get(path, path))


def test_renamed_file_is_no_conflict(repo_dir: Path, tmp_path: Path) -> None:
    DirView.copy_of(repo_dir, tmp_path / "view")
    view = _RenameRecords(tmp_path / "view", repo_dir, {"src/helpers.py": "src/util.py"})
    (view.root / "src/util.py").rename(view.root / "src/helpers.py")
    result = apply(repo_dir, view)
    assert result.ok and set(result.applied) == {"src/util.py", "src/helpers.py"}
    assert tree_state(repo_dir) == tree_state(view.root)


def test_path_below_a_file_left_out_by_pathspec_conflicts(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "README.md").unlink()
    write(view.root, "README.md/inside.txt", "now a directory\n")
    before = tree_state(repo_dir)
    blocked = apply(repo_dir, view, "README.md/inside.txt")
    assert [(c.path, c.reason) for c in blocked.conflicts] == [
        ("README.md/inside.txt", "not-a-directory"),
    ]  # fmt: skip
    assert tree_state(repo_dir) == before
    assert apply(repo_dir, view, "README.md").ok
    assert tree_state(repo_dir) == tree_state(view.root)


def test_files_are_rewritten_in_place_unless_linked(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("shorter\n")
    write(view.root, "src/util.py", "def f():\n    return 2\n" * 50)
    write(view.root, "run.sh", "#!/bin/sh\necho bye\n", mode=0o644)
    (view.root / "README.md").write_text("# edited\n")
    elsewhere = tmp_path / "README.copy"
    os.link(repo_dir / "README.md", elsewhere)
    inodes = {p: os.lstat(repo_dir / p).st_ino for p in ("src/main.py", "src/util.py", "run.sh")}
    assert apply(repo_dir, view).ok
    assert tree_state(repo_dir) == tree_state(view.root)
    # no inode made or freed for a plain rewrite; a file with another name is written aside
    assert {p: os.lstat(repo_dir / p).st_ino for p in inodes} == inodes
    assert elsewhere.read_text() == "# demo\n\nsome text\n"
    assert not [p for p in repo_dir.rglob("*") if ".gitsess-" in p.name]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_leaves_a_rewritten_file_as_it_was(
    repo_dir: Path, tmp_path: Path, small_disk: Path
) -> None:
    repo = copy_repo(repo_dir, small_disk / "repo")
    view = DirView.copy_of(repo, tmp_path / "view")
    write(view.root, "src/main.py", os.urandom(2 << 20))
    before = (repo / "src/main.py").read_bytes()
    with pytest.raises(OSError) as info:
        apply(repo, view)
    assert info.value.errno == errno.ENOSPC
    assert (repo / "src/main.py").read_bytes() == before
