from __future__ import annotations

import shutil
from pathlib import Path

import pygit2

from gitsess.git.changes import compute_changes
from gitsess.git.patch import PatchResult, make_patch
from tests.util import git, write

from .dirview import DirView
from .helpers import copy_repo, tree_state


def patch_of(repo_dir: Path, view: DirView, *specs: str, **kw: object) -> PatchResult:
    repo = pygit2.Repository(str(repo_dir))
    changes = compute_changes(view, repo, pathspecs=specs)
    return make_patch(repo, view, changes, **kw)  # type: ignore[arg-type]


def edit(root: Path) -> None:
    (root / "src/main.py").write_text("patched\n")
    (root / "run.sh").chmod(0o644)
    (root / "docs").rename(root / "manual")
    shutil.rmtree(root / "bin")
    write(root, "bin", b"\x00binary file replacing a directory\xff" * 20)
    write(root, "assets/logo.png", bytes(range(256)) * 40)
    (root / "link").unlink()
    (root / "link").symlink_to("manual/guide.txt")
    write(root, "latin1.txt", "caf\xe9\n".encode("latin-1"))
    (root / "empty-dir").mkdir()
    (root / "README.md").chmod(0o600)


def test_patch_applies_on_the_worktree_and_gives_the_view(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    result = patch_of(repo_dir, view)
    assert b"GIT binary patch" in result.text
    assert set(result.skipped) == {"empty-dir", "README.md"}
    assert "docs/guide.txt" in result.paths and "manual/guide.txt" in result.paths
    before = tree_state(repo_dir)
    git(repo_dir, "apply", "--check", input=result.text)
    assert tree_state(repo_dir) == before  # making a patch changes nothing
    git(repo_dir, "apply", input=result.text)
    assert tree_state(repo_dir, git_only=True) == tree_state(view.root, git_only=True)


def test_mbox_is_taken_by_git_am(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    author = pygit2.Signature("Zoë Ünicode", "zoe@example.com", 1_700_000_000, 120)
    message = "Sessiön changes: a subject\nthat wraps\n\nA body paragraph.\n\nAnother one.\n"
    result = patch_of(repo_dir, view, mbox=True, message=message, author=author)
    assert result.text.startswith(b"From 0000000000000000000000000000000000000000 Mon Sep 17")
    target = copy_repo(repo_dir, tmp_path / "target")
    git(target, "am", "-q", input=result.text)
    fmt = "%an|%ae|%at|%ai|%s|%b"
    shown = git(target, "log", "-1", f"--format={fmt}").rstrip("\n")
    assert shown == (
        "Zoë Ünicode|zoe@example.com|1700000000|2023-11-15 00:13:20 +0200|"
        "Sessiön changes: a subject that wraps|A body paragraph.\n\nAnother one."
    )
    assert git(target, "status", "--porcelain") == ""
    assert tree_state(target, git_only=True) == tree_state(view.root, git_only=True)


def test_empty_patch(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    result = patch_of(repo_dir, view, mbox=True, message="nothing")
    assert result.text == b"" and result.paths == ()


def test_pathspec_limits_patch(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit(view.root)
    result = patch_of(repo_dir, view, "src", "assets")
    assert result.paths == ("assets/logo.png", "src/main.py")
    git(repo_dir, "apply", input=result.text)
    assert git(repo_dir, "status", "--porcelain", raw=True) == " M src/main.py\n?? assets/\n"
