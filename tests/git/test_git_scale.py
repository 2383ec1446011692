"""Size: 1,000 changed files (the default run; timings printed with -s) and a 100 MB file
(slow)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pygit2
import pytest

from gitsess.git.apply_commit import apply_commit
from gitsess.git.apply_worktree import apply_worktree
from gitsess.git.changes import compute_changes
from gitsess.git.diff import diff_changes
from gitsess.git.patch import make_patch
from tests.util import git, make_repo

from .dirview import DirView
from .helpers import copy_repo, tree_state

T = TypeVar("T")
SIG = pygit2.Signature("Scale", "scale@example.com", 1_700_000_000, 0)


def timed(label: str, times: dict[str, float], fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    value = fn()
    times[label] = time.perf_counter() - start
    return value


def report(title: str, times: dict[str, float]) -> None:
    print(f"\n{title}: " + ", ".join(f"{k} {v:.2f}s" for k, v in times.items()))  # noqa: T201


def test_thousand_changed_files(tmp_path: Path) -> None:
    files = {f"pkg{i % 10}/mod{i}.py": f"# module {i}\n" + "x = 1\n" * 20 for i in range(1000)}
    base = make_repo(tmp_path / "base", files)
    view_root = DirView.copy_of(base, tmp_path / "view").root
    for rel in files:
        with (view_root / rel).open("a") as f:
            f.write("y = 2\n")
    times: dict[str, float] = {}

    wt = copy_repo(base, tmp_path / "wt")
    view, repo = DirView(view_root, wt), pygit2.Repository(str(wt))
    changes = timed("changes", times, lambda: compute_changes(view, repo))
    assert len(changes.changes) == 1000
    diff = timed("diff", times, lambda: diff_changes(repo, view, changes))
    assert len(diff.files) == 1000 and diff.additions == 1000
    patch = timed("patch", times, lambda: make_patch(repo, view, changes))
    git(wt, "apply", "--check", input=patch.text)
    result = timed("worktree", times, lambda: apply_worktree(repo, view, changes))
    assert result.ok and len(result.applied) == 1000
    assert tree_state(wt) == tree_state(view_root)

    # the commit goes to the original repository (nothing else needs it any more)
    view, repo = DirView(view_root, base), pygit2.Repository(str(base))
    changes = compute_changes(view, repo)
    commit = timed(
        "commit",
        times,
        lambda: apply_commit(
            repo, view, changes, branch="main", base=None, message="m", author=SIG, committer=SIG
        ),
    )
    assert commit.ok and len(commit.applied) == 1000
    assert git(base, "status", "--porcelain") == ""
    # its objects went in as one pack (packwrite), which git reads and checks whole
    assert "packs: 1" in git(base, "count-objects", "-v")
    git(base, "fsck", "--full", "--strict", "--no-dangling")
    report("1000 files", times)
    assert sum(times.values()) < 60  # generous: a regression to per-file git work would show


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_hundred_megabyte_file(tmp_path: Path) -> None:
    size = 100 * 1024 * 1024
    data = bytearray(random.Random(4).randbytes(size))
    base = make_repo(tmp_path / "base", {"big.bin": bytes(data), "small.txt": "small\n"})
    view_root = DirView.copy_of(base, tmp_path / "view").root
    data[size // 2 : size // 2 + 16] = b"session was here"
    (view_root / "big.bin").write_bytes(bytes(data))
    times: dict[str, float] = {}

    pt = copy_repo(base, tmp_path / "pt")
    view, repo = DirView(view_root, pt), pygit2.Repository(str(pt))
    changes = timed("changes", times, lambda: compute_changes(view, repo))
    assert [c.path for c in changes.changes] == ["big.bin"]
    diff = timed("diff", times, lambda: diff_changes(repo, view, changes))
    assert b"Binary files a/big.bin and b/big.bin differ" in diff.patch()
    patch = timed("patch", times, lambda: make_patch(repo, view, changes))
    times["patch MB"] = len(patch.text) / 1e6
    timed("git apply", times, lambda: git(pt, "apply", input=patch.text))
    assert (pt / "big.bin").read_bytes() == bytes(data)

    wt = copy_repo(base, tmp_path / "wt")
    view, repo = DirView(view_root, wt), pygit2.Repository(str(wt))
    changes = compute_changes(view, repo)
    result = timed("worktree", times, lambda: apply_worktree(repo, view, changes))
    assert result.ok and (wt / "big.bin").read_bytes() == bytes(data)

    cm = copy_repo(base, tmp_path / "cm")
    view, repo = DirView(view_root, cm), pygit2.Repository(str(cm))
    changes = compute_changes(view, repo)
    commit = timed(
        "commit",
        times,
        lambda: apply_commit(
            repo, view, changes, branch="main", base=None, message="m", author=SIG, committer=SIG
        ),
    )
    assert commit.ok
    assert git(cm, "status", "--porcelain") == ""
    assert git(cm, "cat-file", "-s", "HEAD:big.bin").strip() == str(size)
    report("100 MB file", times)
