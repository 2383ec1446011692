"""Random edits of a session view, then every apply target must reproduce the view.

- `apply_worktree` on a copy of the worktree gives a tree identical to the view (modes, empty
  directories and ignored files included, with `include_ignored`);
- the patch, applied with the real `git apply`, gives the same files as git sees them;
- the commit's tree is exactly what `git add -A` of the view would commit (tracked and
  untracked-not-ignored files), and the worktree's `git status` is clean afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsess.git.apply_commit import apply_commit
from gitsess.git.apply_worktree import apply_worktree
from gitsess.git.changes import compute_changes
from gitsess.git.patch import make_patch
from tests.util import git, make_repo

from .dirview import DirView, walk
from .helpers import copy_repo, git_view_tree, tree_state

# *.log is ignored by the base repo; a written .gitignore may ignore more (IGNORING)
NAMES = ["a", "b.txt", "c.bin", "d.log", "sub", "e.sh", ".gitignore"]
IGNORING = b"*.bin\nsub/\n!keep.bin\n"
CONTENTS = [
    b"",
    b"one\n",
    b"one\ntwo\nthree\n",
    b"\x00\x01\x02binary\xff" * 30,
    b"no eol",
    IGNORING,
]
FILE_MODES = [0o644, 0o755, 0o600]
LINK_TARGETS = ["a", "b.txt", "../sub", "missing", "sub/a"]
SIG = pygit2.Signature("Prop", "prop@example.com", 1_700_000_000, 0)


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("prop") / "base"
    repo = make_repo(
        root,
        {
            "a": "alpha\n",
            "b.txt": "".join(f"{i}\n" for i in range(20)),
            "sub/a": "nested\n",
            "sub/c.bin": bytes(range(256)),
            "sub/sub/b.txt": "deep\n",
            "e.sh": "#!/bin/sh\n",
            ".gitignore": "*.log\n",
        },
    )
    (repo / "e.sh").chmod(0o755)
    git(repo, "commit", "-qam", "exec bit")
    return repo


def run_ops(root: Path, data: st.DataObject, count: int) -> None:
    for _ in range(count):
        paths = sorted(walk(root))
        dirs = [""] + [p for p, e in walk(root).items() if e.kind == "dir"]
        op = data.draw(st.sampled_from(["write", "write", "delete", "chmod", "symlink", "mkdir",
                                        "rmtree", "rename"]))  # fmt: skip
        fresh = _join(data.draw(st.sampled_from(dirs)), data.draw(st.sampled_from(NAMES)))
        some = data.draw(st.sampled_from(paths)) if paths else fresh
        # an impossible operation (target exists, not a directory, ...) is skipped
        with contextlib.suppress(OSError):
            _do(root, op, fresh, some, data)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _do(root: Path, op: str, fresh: str, some: str, data: st.DataObject) -> None:
    target = root / some
    if op == "write":
        path = root / data.draw(st.sampled_from([fresh, some]))
        if path.is_symlink():
            path.unlink()
        path.write_bytes(data.draw(st.sampled_from(CONTENTS)))
    elif op == "delete":
        target.unlink()
    elif op == "chmod" and not target.is_symlink():
        modes = [0o755, 0o700] if target.is_dir() else FILE_MODES
        target.chmod(data.draw(st.sampled_from(modes)))
    elif op == "symlink":
        (root / fresh).symlink_to(data.draw(st.sampled_from(LINK_TARGETS)))
    elif op == "mkdir":
        (root / fresh).mkdir()
    elif op == "rmtree" and target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif op == "rename" and not (root / fresh).exists():
        target.rename(root / fresh)


def check_view_round_trips(base: Path, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(prefix="gitsess-prop-") as tmp:
        work = Path(tmp)
        view_root = DirView.copy_of(base, work / "view").root
        run_ops(view_root, data, data.draw(st.integers(1, 8)))
        expected = tree_state(view_root)
        expected_git = tree_state(view_root, git_only=True)

        # --worktree, ignored files included: the real tree becomes the view exactly
        wt = copy_repo(base, work / "wt")
        view, repo = DirView(view_root, wt), pygit2.Repository(str(wt))
        result = apply_worktree(repo, view, compute_changes(view, repo, include_ignored=True))
        assert result.ok, result.conflicts
        assert tree_state(wt) == expected
        assert compute_changes(view, repo, include_ignored=True).changes == ()

        # --patch, ignored files included: git apply gives the view as git sees files
        pt = copy_repo(base, work / "pt")
        view, repo = DirView(view_root, pt), pygit2.Repository(str(pt))
        patch = make_patch(repo, view, compute_changes(view, repo, include_ignored=True))
        if patch.text:
            git(pt, "apply", "--check", input=patch.text)
            git(pt, "apply", input=patch.text)
        assert tree_state(pt, git_only=True) == expected_git

        # --commit: exactly what `git add -A` of the view commits; the worktree is clean after
        cm = copy_repo(base, work / "cm")
        want_tree = git_view_tree(cm, view_root)
        view, repo = DirView(view_root, cm), pygit2.Repository(str(cm))
        changes = compute_changes(view, repo)
        commit = apply_commit(
            repo, view, changes, branch="main", base=None, message="prop", author=SIG,
            committer=SIG,
        )  # fmt: skip
        assert commit.ok, commit.conflicts
        assert git(cm, "rev-parse", "HEAD^{tree}").strip() == want_tree
        assert git(cm, "status", "--porcelain") == ""
        git(cm, "fsck", "--no-progress")


COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


@settings(max_examples=12, **COMMON)  # type: ignore[arg-type]
@given(data=st.data())
def test_apply_targets_reproduce_the_view(base_repo: Path, data: st.DataObject) -> None:
    check_view_round_trips(base_repo, data)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=300, **COMMON)  # type: ignore[arg-type]
@given(data=st.data())
def test_apply_targets_reproduce_the_view_long(base_repo: Path, data: st.DataObject) -> None:
    check_view_round_trips(base_repo, data)
