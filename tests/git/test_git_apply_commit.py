from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pygit2
import pytest

from gitsess.errors import GitsessError
from gitsess.git.apply_commit import CommitResult, apply_commit, finish_commit
from gitsess.git.changes import KEEP_LIMIT, compute_changes
from gitsess.git.scratch import scratch_repo
from tests.util import git, make_repo, write

from .dirview import DirView
from .helpers import git_view_tree, tree_state

SIG = pygit2.Signature("Session Author", "session@example.com", 1_700_000_000, 60)


def commit(
    repo_dir: Path, view: DirView, *specs: str, branch: str = "main", base: str | None = None,
    dry_run: bool = False, force: bool = False, message: str = "apply session",
) -> CommitResult:  # fmt: skip
    repo = pygit2.Repository(str(repo_dir))
    changes = compute_changes(view, repo, pathspecs=specs)
    return apply_commit(
        repo, view, changes, branch=branch, base=base, message=message, author=SIG,
        committer=SIG, dry_run=dry_run, force=force,
    )  # fmt: skip


def commit_written_meanwhile(
    repo_dir: Path, view: DirView, path: str, data: str | bytes, message: str
) -> CommitResult:
    """`commit` with the changes kept in a scratch repository, and `path` written in the view
    again between computing them and committing."""
    repo = pygit2.Repository(str(repo_dir))
    with scratch_repo(repo) as scratch:
        changes = compute_changes(view, repo, store=scratch)
        write(view.root, path, data)
        return apply_commit(
            repo, view, changes, branch="main", base=None, message=message, author=SIG,
            committer=SIG, scratch=scratch,
        )  # fmt: skip


def head(repo_dir: Path, ref: str = "HEAD") -> str:
    return git(repo_dir, "rev-parse", ref).strip()


def snapshot(repo_dir: Path) -> tuple[object, ...]:
    """Everything an apply that changes nothing must leave alone."""
    return (
        tree_state(repo_dir),
        (repo_dir / ".git/index").read_bytes(),
        git(repo_dir, "for-each-ref"),
        git(repo_dir, "count-objects", "-v"),
    )


def test_commit_holds_the_view_and_status_is_clean(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    root = view.root
    (root / "src/main.py").write_text("new main\n")
    (root / "README.md").unlink()
    (root / "run.sh").chmod(0o644)
    write(root, "pkg/new.py", "x = 1\n")
    write(root, "debug.log", "ignored\n")
    (root / "link").unlink()
    (root / "link").symlink_to("pkg")
    old = head(repo_dir)
    result = commit(repo_dir, view)
    assert result.ok and result.commit is not None and result.worktree_updated
    assert not result.merged and result.parent == old
    assert head(repo_dir) == result.commit and head(repo_dir, "HEAD~1") == old
    assert git(repo_dir, "rev-parse", "HEAD^{tree}").strip() == git_view_tree(repo_dir, root)
    assert git(repo_dir, "status", "--porcelain") == ""
    # the index carries the new files' stat data: plumbing that does not refresh sees them clean
    git(repo_dir, "diff-files", "--quiet")
    assert git(repo_dir, "log", "-1", "--format=%an <%ae>|%s").strip() == (
        "Session Author <session@example.com>|apply session"
    )
    assert "debug.log" not in result.applied
    assert not (repo_dir / "debug.log").exists()
    assert set(result.applied) == {
        "src/main.py",
        "README.md",
        "run.sh",
        "pkg",
        "pkg/new.py",
        "link",
    }
    git(repo_dir, "fsck", "--strict")


def test_kept_blobs_are_committed_and_big_files_read_again(repo_dir: Path, tmp_path: Path) -> None:
    """With a store, the commit holds the small files as compute_changes hashed them, without
    reading the view again; a file too big to keep is read again, and if it changed since,
    the apply stops."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "small.txt", "seen\n")
    write(view.root, "big.bin", b"x" * (KEEP_LIMIT + 1))
    result = commit_written_meanwhile(
        repo_dir, view, "small.txt", "written after the changes were computed\n", "kept"
    )
    assert result.ok and head(repo_dir) == result.commit
    assert git(repo_dir, "show", "HEAD:small.txt", raw=True) == "seen\n"
    assert git(repo_dir, "cat-file", "-s", "HEAD:big.bin").strip() == str(KEEP_LIMIT + 1)
    git(repo_dir, "fsck", "--strict")
    write(view.root, "big.bin", b"y" * (KEEP_LIMIT + 2))
    with pytest.raises(GitsessError, match="changed in the session while applying"):
        commit_written_meanwhile(repo_dir, view, "big.bin", b"z" * (KEEP_LIMIT + 2), "late")
    assert head(repo_dir) == result.commit


def test_dry_run_and_empty_change_set_change_nothing(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    before = snapshot(repo_dir)
    nothing = commit(repo_dir, view)
    assert nothing.commit is None and nothing.applied == ()
    write(view.root, "fresh.txt", "fresh\n")
    result = commit(repo_dir, view, dry_run=True)
    assert result.ok and result.dry_run and result.commit is None and result.tree is not None
    assert result.applied == ("fresh.txt",)
    assert snapshot(repo_dir) == before


def test_moved_branch_merges_cleanly(repo_dir: Path, tmp_path: Path) -> None:
    base = head(repo_dir)
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    lines = (view.root / "src/main.py").read_text().splitlines(keepends=True)
    lines[35] = "session edit near the end\n"
    (view.root / "src/main.py").write_text("".join(lines))
    write(view.root, "session.txt", "from the session\n")
    # meanwhile, in the real worktree: a commit touching the same file far away, and another
    real = (repo_dir / "src/main.py").read_text().replace("line 2\n", "real edit near the top\n")
    (repo_dir / "src/main.py").write_text(real)
    (repo_dir / "README.md").write_text("real readme\n")
    git(repo_dir, "commit", "-qam", "real work")
    tip = head(repo_dir)
    result = commit(repo_dir, view, base=base)
    assert result.ok and result.merged and result.parent == tip
    merged = (repo_dir / "src/main.py").read_text()
    assert "real edit near the top" in merged and "session edit near the end" in merged
    assert git(repo_dir, "show", "HEAD:src/main.py", raw=True) == merged
    assert git(repo_dir, "show", "HEAD:README.md", raw=True) == "real readme\n"
    assert git(repo_dir, "show", "HEAD:session.txt", raw=True) == "from the session\n"
    assert git(repo_dir, "status", "--porcelain") == ""
    assert "src/main.py" in result.updated_paths


def test_session_started_after_real_commit_does_not_conflict(
    repo_dir: Path, tmp_path: Path
) -> None:
    base = head(repo_dir)
    (repo_dir / "src/main.py").write_text("line 0\nreal\n")
    git(repo_dir, "commit", "-qam", "real rewrite")
    # the session copies the file after that commit and edits right next to the real change
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("line 0\nreal\nsession\n")
    result = commit(repo_dir, view, base=base)
    assert result.ok, result.conflicts
    assert git(repo_dir, "show", "HEAD:src/main.py", raw=True) == "line 0\nreal\nsession\n"


def test_conflicts_change_nothing_and_name_every_path(repo_dir: Path, tmp_path: Path) -> None:
    base = head(repo_dir)
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("session version\n")
    (view.root / "src/util.py").write_text("session util\n")
    (view.root / "docs/guide.txt").write_text("no conflict here\n")
    # the branch moves elsewhere: a second worktree-less update through another clone of HEAD
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(repo_dir), str(other))
    (other / "src/main.py").write_text("branch version\n")
    (other / "src/util.py").unlink()
    git(other, "-c", "user.name=O", "-c", "user.email=o@x", "commit", "-qam", "elsewhere")
    git(repo_dir, "fetch", "-q", str(other), "main:side")
    before = snapshot(repo_dir)
    result = commit(repo_dir, view, branch="side", base=base)
    assert not result.ok and result.commit is None
    assert [(c.path, c.reason) for c in result.conflicts] == [
        ("src/main.py", "merge"), ("src/util.py", "merge"),
    ]  # fmt: skip
    assert snapshot(repo_dir) == before
    assert commit(repo_dir, view, branch="side", base=base, dry_run=True).conflicts == (
        result.conflicts
    )


def test_commit_to_branch_not_checked_out(repo_dir: Path, tmp_path: Path) -> None:
    git(repo_dir, "branch", "feature")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "README.md").write_text("feature readme\n")
    (view.root / "docs/guide.txt").chmod(0o600)  # not something git can hold
    before = tree_state(repo_dir)
    result = commit(repo_dir, view, branch="feature")
    assert result.ok and not result.worktree_updated
    assert result.applied == ("README.md",) and result.skipped == ("docs/guide.txt",)
    assert tree_state(repo_dir) == before
    assert git(repo_dir, "show", "feature:README.md", raw=True) == "feature readme\n"
    assert head(repo_dir, "feature~1") == head(repo_dir, "main")


def test_branch_checked_out_elsewhere_is_refused(repo_dir: Path, tmp_path: Path) -> None:
    git(repo_dir, "worktree", "add", "-q", "-b", "feature", str(tmp_path / "wt"))
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "x.txt", "x\n")
    result = commit(repo_dir, view, branch="feature")
    assert [c.reason for c in result.conflicts] == ["checked-out-elsewhere"]
    assert head(repo_dir, "feature") == head(repo_dir, "main")


def test_real_file_changed_since_copy_blocks_commit(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("session\n")
    (repo_dir / "src/main.py").write_text("uncommitted real edit\n")
    os.utime(repo_dir / "src/main.py", ns=(1, 1))
    before = snapshot(repo_dir)
    result = commit(repo_dir, view)
    assert [(c.path, c.reason) for c in result.conflicts] == [("src/main.py", "worktree-changed")]
    assert snapshot(repo_dir) == before
    forced = commit(repo_dir, view, force=True)
    assert forced.ok and (repo_dir / "src/main.py").read_text() == "session\n"


def test_unborn_branch(tmp_path: Path) -> None:
    repo_dir = make_repo(tmp_path / "empty", {})
    git(repo_dir, "update-ref", "-d", "refs/heads/main")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "first.txt", "first\n")
    result = commit(repo_dir, view, message="first commit")
    assert result.ok and result.parent is None and result.commit is not None
    assert git(repo_dir, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(repo_dir, "status", "--porcelain") == ""


@pytest.mark.parametrize("size", [100, KEEP_LIMIT + 1])
def test_worktree_gets_the_committed_bytes_of_a_blob_git_already_had(
    repo_dir: Path, tmp_path: Path, size: int
) -> None:
    """libgit2 does not keep such a blob in the scratch repository's memory. A small one is
    kept aside as it is hashed; a big one is read from the view when that still holds those
    bytes, else from the object store."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")

    def committed(name: str) -> str:
        return f"{name} as committed\n".ljust(size, "x")

    for name in ("same.txt", "changed.txt"):
        write(view.root, name, committed(name))
        git(repo_dir, "hash-object", "-w", str(view.root / name))
    result = commit_written_meanwhile(
        repo_dir, view, "changed.txt", "written after the commit was planned\n", "m"
    )
    assert result.ok and result.worktree_updated
    for name in ("same.txt", "changed.txt"):
        assert (repo_dir / name).read_text() == committed(name)
    assert git(repo_dir, "status", "--porcelain") == ""


def test_crash_after_journal_is_completed_by_finish_commit(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("journaled\n")
    (view.root / "README.md").unlink()
    (view.root / "docs/guide.txt").chmod(0o600)  # a mode-only change rides along
    (view.root / "fresh").mkdir()
    repo = pygit2.Repository(str(repo_dir))
    journal: list[CommitResult] = []

    def crash(result: CommitResult) -> None:
        journal.append(CommitResult.from_json(json.loads(json.dumps(result.to_json()))))
        raise KeyboardInterrupt  # killed right after journaling

    old = head(repo_dir)
    with pytest.raises(KeyboardInterrupt):
        apply_commit(
            repo, view, compute_changes(view, repo), branch="main", base=None, message="m",
            author=SIG, committer=SIG, on_prepared=crash,
        )  # fmt: skip
    assert head(repo_dir) == old and git(repo_dir, "status", "--porcelain") == ""
    finish_commit(pygit2.Repository(str(repo_dir)), journal[0])
    finish_commit(pygit2.Repository(str(repo_dir)), journal[0])  # idempotent
    assert head(repo_dir) == journal[0].commit
    assert (repo_dir / "src/main.py").read_text() == "journaled\n"
    assert not (repo_dir / "README.md").exists()
    assert (repo_dir / "docs/guide.txt").stat().st_mode & 0o777 == 0o600
    assert (repo_dir / "fresh").is_dir()
    assert git(repo_dir, "status", "--porcelain") == ""


def test_mode_only_change_of_untracked_file_rides_along(repo_dir: Path, tmp_path: Path) -> None:
    write(repo_dir, "notes.txt", "untracked notes\n")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "notes.txt").chmod(0o600)
    write(view.root, "added.txt", "added\n")
    result = commit(repo_dir, view)
    assert result.ok and set(result.applied) == {"notes.txt", "added.txt"}
    assert (repo_dir / "notes.txt").stat().st_mode & 0o777 == 0o600
    assert git(repo_dir, "status", "--porcelain", raw=True) == "?? notes.txt\n"
    assert git(repo_dir, "show", "HEAD:added.txt", raw=True) == "added\n"


def test_linked_worktree_is_updated_when_bound(repo_dir: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    git(repo_dir, "worktree", "add", "-q", "-b", "feature", str(linked))
    (repo_dir / ".git/info").mkdir(exist_ok=True)
    (repo_dir / ".git/info/exclude").write_text("*.tmp\n")  # the common dir's excludes count
    view = DirView.copy_of(linked, tmp_path / "view")
    (view.root / "src/main.py").write_text("on feature\n")
    write(view.root, "scratch.tmp", "excluded\n")
    main_before = tree_state(repo_dir)
    result = commit(linked, view, branch="feature")
    assert result.ok and result.worktree_updated and result.applied == ("src/main.py",)
    assert git(linked, "status", "--porcelain") == ""
    assert git(repo_dir, "show", "feature:src/main.py", raw=True) == "on feature\n"
    assert head(repo_dir, "main") == head(repo_dir, "feature~1")
    assert tree_state(repo_dir) == main_before
    # from the main worktree, the same branch is checked out elsewhere
    other_view = DirView.copy_of(repo_dir, tmp_path / "view2")
    write(other_view.root, "x.txt", "x\n")
    refused = commit(repo_dir, other_view, branch="feature")
    assert [c.reason for c in refused.conflicts] == ["checked-out-elsewhere"]
    assert str(linked) in refused.conflicts[0].detail


def test_files_and_directories_that_replace_each_other(repo_dir: Path, tmp_path: Path) -> None:
    """A file where a directory of files was, and directories of files where files were, some
    sharing parents: the commit and the index drop what is in the way, once each."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    root = view.root
    shutil.rmtree(root / "docs")
    write(root, "docs", "docs is a file now\n")
    (root / "src/util.py").unlink()
    write(root, "src/util.py/__init__.py", "x = 1\n")
    write(root, "src/util.py/more/deep.py", "y = 2\n")
    (root / "README.md").unlink()
    write(root, "README.md/index.md", "# moved in\n")
    result = commit(repo_dir, view)
    assert result.ok and result.commit is not None and result.worktree_updated
    assert git(repo_dir, "rev-parse", "HEAD^{tree}").strip() == git_view_tree(repo_dir, root)
    assert git(repo_dir, "status", "--porcelain") == ""
    git(repo_dir, "diff-files", "--quiet")
    assert git(repo_dir, "ls-files").split() == [
        ".gitignore", "README.md/index.md", "bin/blob.bin", "docs", "link", "run.sh",
        "src/main.py", "src/util.py/__init__.py", "src/util.py/more/deep.py",
    ]  # fmt: skip
    git(repo_dir, "fsck", "--strict")


def test_selected_paths_drop_what_is_in_their_way(repo_dir: Path, tmp_path: Path) -> None:
    """Only the new paths are selected, not the removal of what they replace (files below a
    file, a file where a directory was), for a branch that is not checked out (the bound
    worktree refuses files below a file: `not-a-directory`): what is in their way still goes
    from the commit's tree."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    root = view.root
    (root / "src/util.py").unlink()
    write(root, "src/util.py/a.py", "a = 1\n")
    write(root, "src/util.py/b.py", "b = 2\n")
    (root / "README.md").unlink()
    write(root, "README.md/index.md", "# moved in\n")
    shutil.rmtree(root / "docs")
    write(root, "docs", "a file where a directory was\n")
    specs = ("src/util.py/a.py", "src/util.py/b.py", "README.md/index.md", "docs")
    result = commit(repo_dir, view, *specs, branch="side", base=head(repo_dir))
    assert result.ok and result.commit is not None and not result.worktree_updated
    files = git(repo_dir, "ls-tree", "-r", "--name-only", "side").split()
    assert set(specs) <= set(files)
    assert not {"src/util.py", "README.md", "docs/guide.txt"} & set(files)
    git(repo_dir, "fsck", "--strict")


def test_no_identity_is_refused_before_anything_is_written(
    repo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(repo_dir, "config", "--unset", "user.name")
    git(repo_dir, "config", "--unset", "user.email")
    for role in ("AUTHOR", "COMMITTER"):
        for field in ("NAME", "EMAIL"):
            monkeypatch.delenv(f"GIT_{role}_{field}", raising=False)
    levels = (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG)
    saved = [pygit2.settings.search_path[level] for level in levels]
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "src/main.py").write_text("new main\n")
    write(view.root, "pkg/new.py", "x = 1\n")
    before = snapshot(repo_dir)
    try:
        for level in levels:  # no user.name from the machine's own git config either
            pygit2.settings.search_path[level] = str(tmp_path / "no-config")
        repo = pygit2.Repository(str(repo_dir))
        changes = compute_changes(view, repo)
        with pytest.raises(GitsessError, match=r"no author: set user\.name and user\.email"):
            apply_commit(repo, view, changes, branch="main", base=None, message="m")
    finally:
        for level, path in zip(levels, saved, strict=True):
            pygit2.settings.search_path[level] = path
    assert snapshot(repo_dir) == before  # no pack of the commit's objects either


def _with_attributes(repo_dir: Path, attributes: str) -> None:
    (repo_dir / ".gitattributes").write_text(attributes)
    git(repo_dir, "add", ".gitattributes")
    git(repo_dir, "commit", "-q", "-m", "attributes")


def test_a_file_is_committed_as_git_add_stores_it(repo_dir: Path, tmp_path: Path) -> None:
    """`text=auto` keeps LF lines in the repository: a session's CRLF file is committed with
    LF lines, as `git add` would, its CRLF bytes stay in the worktree, and status is clean.
    A file whose blob has CRLF lines keeps them (git's rule: no change of every line)."""
    (repo_dir / "legacy.txt").write_bytes(b"one\r\ntwo\r\n")
    git(repo_dir, "add", "legacy.txt")
    git(repo_dir, "commit", "-q", "-m", "a CRLF file from before the attributes")
    _with_attributes(repo_dir, "*.txt text=auto\n")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "notes.txt", b"a\r\nb\r\n")
    write(view.root, "legacy.txt", b"one\r\ntwo\r\nthree\r\n")
    write(view.root, "data.bin", b"\0\r\n")  # binary: no conversion
    result = commit(repo_dir, view)
    assert result.ok and result.commit is not None
    assert git(repo_dir, "show", "HEAD:notes.txt", raw=True) == "a\nb\n"
    assert git(repo_dir, "show", "HEAD:legacy.txt", raw=True) == "one\r\ntwo\r\nthree\r\n"
    assert git(repo_dir, "rev-parse", "HEAD^{tree}").strip() == git_view_tree(repo_dir, view.root)
    assert (repo_dir / "notes.txt").read_bytes() == b"a\r\nb\r\n"
    assert git(repo_dir, "status", "--porcelain") == ""


def test_core_autocrlf_cleans_as_in_git(repo_dir: Path, tmp_path: Path) -> None:
    git(repo_dir, "config", "core.autocrlf", "input")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "notes.txt", b"a\r\nb\r\n")
    assert commit(repo_dir, view).ok
    assert git(repo_dir, "show", "HEAD:notes.txt", raw=True) == "a\nb\n"
    assert git(repo_dir, "status", "--porcelain") == ""


def test_a_file_a_filter_driver_cleans_is_refused(repo_dir: Path, tmp_path: Path) -> None:
    """A driver's clean command (`filter=lfs`) only git runs: committing the file whole
    would put a big file where the repository keeps a pointer. Nothing is committed."""
    _with_attributes(repo_dir, "*.big filter=up.per\n")  # (a driver's name may hold dots)
    git(repo_dir, "config", "filter.up.per.clean", "tr a-z A-Z")
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "model.big", "weights\n")
    write(view.root, "notes.md", "note\n")
    before = snapshot(repo_dir)
    with pytest.raises(GitsessError, match=r"model\.big has the gitattributes filter 'up\.per'"):
        commit(repo_dir, view)
    assert snapshot(repo_dir) == before
    # a driver configured nowhere filters nothing, in git too
    git(repo_dir, "config", "--unset", "filter.up.per.clean")
    assert commit(repo_dir, view).ok
    assert git(repo_dir, "show", "HEAD:model.big", raw=True) == "weights\n"
