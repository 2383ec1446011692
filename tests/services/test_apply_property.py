"""Random operations inside a mounted session; then every apply target must reproduce the view.

Each example gets its own repository and session, mounted for real. After the operations (done
through the mount, as any process inside would):
- `apply --patch`, applied by the real `git apply` to a copy of the repository, gives the view's
  files as git sees them;
- `apply --commit` on a new branch gives a commit whose tree is what `git add -A` of the view
  would commit (tracked and untracked-not-ignored files);
- `apply --worktree` makes the real tree identical to the view (modes, empty directories and
  ignored files included), the view stays as it was, and nothing is left to apply.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitsess.git.repo import discover
from gitsess.services import apply, sessions
from tests.apply_util import mounted
from tests.git.helpers import copy_repo, git_view_tree, tree_state
from tests.git.test_git_property import run_ops
from tests.util import git, make_repo

pytestmark = pytest.mark.fuse


@pytest.fixture
def template(tmp_path: Path) -> Path:
    repo = make_repo(
        tmp_path / "template",
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


def check_session_round_trips(template: Path, work: Path, data: st.DataObject) -> None:
    repo = copy_repo(template, work / "repo")
    ctx = discover(repo, env={})
    session = sessions.create(ctx, "prop")
    with mounted(ctx, session) as m:
        run_ops(m.mnt, data, data.draw(st.integers(1, 8)))
        expected = tree_state(m.mnt)
        expected_git = tree_state(m.mnt, git_only=True)
        want_tree = git_view_tree(repo, m.mnt)

        patch = apply.apply_to_patch(ctx, session, include_ignored=True)
        assert patch.ok and patch.patch is not None
        copy = copy_repo(template, work / "patched")
        if patch.patch.text:
            git(copy, "apply", "--check", input=patch.patch.text)
            git(copy, "apply", input=patch.patch.text)
        assert tree_state(copy, git_only=True) == expected_git

        side = apply.apply_to_commit(ctx, session, message="prop", branch="side")
        assert side.ok, side.conflicts
        made = side.commit is not None and side.commit.commit is not None
        assert git(repo, "rev-parse", "side^{tree}" if made else "HEAD^{tree}").strip() == want_tree

        done = apply.apply_to_worktree(ctx, session, include_ignored=True)
        if not done.ok:
            # Nothing touched the real tree but the session, so every conflict here is one the
            # overlay's records cannot rule out (a path whose worktree object the session
            # replaced keeps no record of it); --force is the user's way past them.
            assert tree_state(repo) == tree_state(template)
            done = apply.apply_to_worktree(ctx, session, include_ignored=True, force=True)
        assert done.ok, done.conflicts
        assert done.kept == ()
        assert files_and_modes(repo) == files_and_modes_of(expected)
        assert files_and_modes(m.mnt) == files_and_modes_of(expected)
        left, _ = apply.diff(ctx, session, include_ignored=True)
        assert left.files == ()
        git(repo, "fsck", "--no-progress")


def files_and_modes_of(state: dict[str, tuple[str, int, bytes]]) -> dict[str, object]:
    """The tree without directories' permission bits. A chmod of a directory merged with the
    worktree is not among the view's touched paths (the overlay reports what changed inside
    it, not its own mode), so no apply carries it; and when an apply drops the last change
    inside it, the overlay turns it back into the plain worktree directory, mode and all."""
    return {p: (kind, 0, data) if kind == "dir" else (kind, perm, data)
            for p, (kind, perm, data) in state.items()}  # fmt: skip


def files_and_modes(root: Path) -> dict[str, object]:
    return files_and_modes_of(tree_state(root))


COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


def _run(
    template: Path, tmp_path: Path, data: st.DataObject, counter: itertools.count[int]
) -> None:
    work = tmp_path / f"ex{next(counter)}"
    work.mkdir()
    try:
        check_session_round_trips(template, work, data)
    finally:
        shutil.rmtree(work, ignore_errors=True)


_examples = itertools.count()


@settings(max_examples=6, **COMMON)  # type: ignore[arg-type]
@given(data=st.data())
def test_apply_targets_reproduce_a_live_view(
    template: Path, tmp_path: Path, data: st.DataObject
) -> None:
    _run(template, tmp_path, data, _examples)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=150, **COMMON)  # type: ignore[arg-type]
@given(data=st.data())
def test_apply_targets_reproduce_a_live_view_long(
    template: Path, tmp_path: Path, data: st.DataObject
) -> None:
    _run(template, tmp_path, data, _examples)
