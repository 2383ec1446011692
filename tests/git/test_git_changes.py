from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pygit2
import pytest

from gitsess.errors import GitsessError
from gitsess.git.changes import Change, compute_changes
from gitsess.git.pathspec import Pathspec
from tests.util import git, write

from .dirview import DirView
from .helpers import git_view_diff


def view_of(repo_dir: Path, tmp_path: Path) -> DirView:
    return DirView.copy_of(repo_dir, tmp_path / "view")


def changed(view: DirView, repo_dir: Path, *specs: str, ignored: bool = False) -> dict[str, Change]:
    cs = compute_changes(
        view, pygit2.Repository(str(repo_dir)), pathspecs=specs, include_ignored=ignored
    )
    return {c.path: c for c in cs.changes}


def test_identical_copy_is_no_change(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    # rewrite a file with the same bytes: a copy-up that changes nothing
    data = (view.root / "README.md").read_bytes()
    (view.root / "README.md").write_bytes(data)
    os.utime(view.root / "README.md", ns=(1, 1))
    repo = pygit2.Repository(str(repo_dir))
    assert compute_changes(view, repo).changes == ()
    # even when the view claims the whole tree is touched, content decides
    (view.root / "src/main.py").write_text("different\n")
    cs = compute_changes(_AllTouched(view), repo)
    assert [c.path for c in cs.changes] == ["src/main.py"]


class _AllTouched(DirView):
    """A view that claims everything changed: the walk must still find no difference."""

    def __init__(self, inner: DirView) -> None:
        self.__dict__.update(inner.__dict__)

    def touched_paths(self) -> list[str]:
        return [""]


def test_kinds_of_change(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    root = view.root
    (root / "src/util.py").write_text("def f():\n    return 2\n")
    (root / "run.sh").chmod(0o644)
    (root / "README.md").chmod(0o600)  # permission change git does not see
    (root / "link").unlink()
    (root / "link").symlink_to("README.md")
    shutil.rmtree(root / "docs")
    (root / "docs").write_text("now a file\n")
    (root / "bin/blob.bin").unlink()
    (root / "bin").rmdir()
    (root / "bin").symlink_to("src")
    (root / "empty").mkdir()
    write(root, "new/deep/file.txt", "hello\n")
    got = changed(view, repo_dir)
    assert set(got) == {
        "src/util.py", "run.sh", "README.md", "link", "docs", "docs/guide.txt", "bin",
        "bin/blob.bin", "empty", "new", "new/deep", "new/deep/file.txt",
    }  # fmt: skip
    assert got["src/util.py"].git_visible
    assert got["run.sh"].git_old is not None and got["run.sh"].git_old[1] == 0o100755
    assert got["run.sh"].git_new is not None and got["run.sh"].git_new[1] == 0o100644
    assert not got["README.md"].git_visible
    assert got["docs"].old is not None and got["docs"].old.kind == "dir"
    assert got["docs"].new is not None and got["docs"].new.kind == "file"
    assert got["docs/guide.txt"].new is None
    assert got["bin"].new is not None and got["bin"].new.kind == "symlink"
    assert not got["empty"].git_visible and not got["new/deep"].git_visible
    new = got["new/deep/file.txt"]
    assert new.old is None and new.new is not None
    assert new.new.oid == str(pygit2.hash(b"hello\n"))


def test_devices_fifos_and_sockets_of_the_view_are_special(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    root = view.root
    for side in (repo_dir, root):  # the worktree's own, shown as it is: no change
        os.mkfifo(side / "src" / "worktree-pipe")
    os.mkfifo(root / "src" / "pipe")
    os.mknod(root / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.mkfifo(root / "docs" / "out.log")  # ignored by the committed *.log
    repo = pygit2.Repository(str(repo_dir))
    cs = compute_changes(view, repo)
    assert cs.special == ("null", "src/pipe")
    assert cs.changes == ()
    assert compute_changes(view, repo, pathspecs=["src"]).special == ("src/pipe",)
    assert "docs/out.log" in compute_changes(view, repo, include_ignored=True).special


def test_renamed_directory_is_two_touched_paths(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    (view.root / "src").rename(view.root / "lib")
    assert sorted(view.touched_paths()) == ["lib", "src"]
    got = changed(view, repo_dir)
    assert {p for p, c in got.items() if c.git_visible} == {
        "src/main.py", "src/util.py", "lib/main.py", "lib/util.py",
    }  # fmt: skip


def test_gitignore_as_seen_in_the_view(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    root = view.root
    write(root, "out.log", "x")  # ignored by the committed *.log
    write(root, "build/a.o", "x")  # ignored directory
    write(root, "keep.tmp", "x")
    write(root, "src/.gitignore", "*.tmp\n!keep.tmp\n")  # new rules inside the session
    write(root, "src/x.tmp", "x")
    write(root, "src/keep.tmp", "x")
    (root / ".gitignore").write_text("*.log\nbuild/\n!important.log\n")
    write(root, "important.log", "x")
    got = changed(view, repo_dir)
    assert set(got) == {".gitignore", "keep.tmp", "src/.gitignore", "src/keep.tmp", "important.log"}
    everything = changed(view, repo_dir, ignored=True)
    assert {"out.log", "build", "build/a.o", "src/x.tmp"} <= set(everything)


def test_tracked_files_are_never_ignored(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    (view.root / ".gitignore").write_text("*.py\ndocs/\n")
    (view.root / "src/main.py").write_text("changed\n")
    (view.root / "docs/guide.txt").write_text("changed\n")
    write(view.root, "src/new.py", "untracked and now ignored\n")
    got = changed(view, repo_dir)
    assert set(got) == {".gitignore", "src/main.py", "docs/guide.txt"}


def test_an_ignored_file_where_a_tracked_directory_was(repo_dir: Path, tmp_path: Path) -> None:
    """As `git add -A`: the directory's tracked files are removed, the untracked file that
    replaced it in an excluded directory is left out (it was taken as tracked, and committed;
    found by the apply property test)."""
    view = view_of(repo_dir, tmp_path)
    shutil.rmtree(view.root / "docs")
    (view.root / ".gitignore").write_text("*.log\n/docs\n")
    (view.root / "docs").write_text("a file now\n")
    got = changed(view, repo_dir)
    theirs = git_view_diff(repo_dir, view.root, "--name-only").split()
    assert set(got) == set(theirs) == {".gitignore", "docs/guide.txt"}
    assert got["docs/guide.txt"].new is None
    assert set(changed(view, repo_dir, ignored=True)) == {".gitignore", "docs", "docs/guide.txt"}


def test_info_exclude_is_honoured(repo_dir: Path, tmp_path: Path) -> None:
    (repo_dir / ".git/info").mkdir(exist_ok=True)
    (repo_dir / ".git/info/exclude").write_text("secret*\n")
    view = view_of(repo_dir, tmp_path)
    write(view.root, "secret.txt", "x")
    write(view.root, "public.txt", "x")
    assert set(changed(view, repo_dir)) == {"public.txt"}


def test_pathspecs(repo_dir: Path, tmp_path: Path) -> None:
    view = view_of(repo_dir, tmp_path)
    for rel in ("src/main.py", "src/util.py", "docs/guide.txt", "README.md"):
        (view.root / rel).write_text("changed\n")
    assert set(changed(view, repo_dir, "src")) == {"src/main.py", "src/util.py"}
    assert set(changed(view, repo_dir, "src/")) == {"src/main.py", "src/util.py"}
    assert set(changed(view, repo_dir, "*.py")) == {"src/main.py", "src/util.py"}
    assert set(changed(view, repo_dir, ":(glob)*.py")) == set()
    assert set(changed(view, repo_dir, ":(glob)**/*.py")) == {"src/main.py", "src/util.py"}
    assert set(changed(view, repo_dir, ":!src")) == {"docs/guide.txt", "README.md"}
    assert set(changed(view, repo_dir, ".", ":(exclude)*.md")) == {
        "src/main.py", "src/util.py", "docs/guide.txt",
    }  # fmt: skip
    cs = compute_changes(view, pygit2.Repository(str(repo_dir)), pathspecs=["docs"])
    assert set(cs.excluded) == {"README.md", "src/main.py", "src/util.py"}


def test_pathspec_unknown_magic_is_an_error() -> None:
    with pytest.raises(GitsessError):
        Pathspec([":(nope)x"])


def test_ignore_rules_agree_with_git(tmp_path: Path) -> None:
    rules = [
        "*.o", "/root-only", "dir/", "a/**/b", "**/deep", "x/**", "!keep.o", "[ab]?.c",
        "sp\\ ace", "\\#hash", "nested/*.txt", "[!q]z",
    ]  # fmt: skip
    paths = [
        "f.o", "keep.o", "sub/f.o", "root-only", "sub/root-only", "dir/f", "sub/dir/f", "a/b",
        "a/x/y/b", "q/deep", "deep", "x/1", "x/2/3", "ab.c", "bb.c", "cb.c", "sp ace", "#hash",
        "nested/n.txt", "nested/sub/n.txt", "qz", "rz", "plain",
    ]  # fmt: skip
    from tests.util import make_repo

    repo = make_repo(tmp_path / "r", {".gitignore": "\n".join(rules) + "\n"})
    view = DirView.copy_of(repo, tmp_path / "v")
    for p in paths:
        write(view.root, p, "x")
    got = changed(view, repo)
    answer = git(
        view.root, "--git-dir", str(repo / ".git"), "--work-tree", str(view.root),
        "check-ignore", "--stdin", input="\n".join(paths).encode(), check=False,
    )  # fmt: skip
    git_ignored = set(answer.splitlines())
    assert git_ignored  # the rules do ignore something
    files_seen = {p for p, c in got.items() if c.git_new is not None}
    assert files_seen == set(paths) - git_ignored


def test_symlink_where_a_directory_was_hides_nothing_behind_it(
    repo_dir: Path, tmp_path: Path
) -> None:
    """A touched path below a real symlink is not looked up through the link."""
    view = view_of(repo_dir, tmp_path)
    (view.root / "src/util.py").write_text("changed\n")
    (repo_dir / "alias").symlink_to(".")  # the real tree reaches itself as alias/

    class Touching(DirView):
        def touched_paths(self) -> list[str]:
            return ["alias/docs/guide.txt", "src/util.py"]

    touching = Touching(view.root, repo_dir)
    got = {c.path: c for c in compute_changes(touching, pygit2.Repository(str(repo_dir))).changes}
    # the view has no alias/docs/guide.txt and the real one is no file of the tree either
    assert set(got) == {"src/util.py"}


def test_a_directory_replaced_by_a_symlink_into_itself_is_one_change(
    repo_dir: Path, tmp_path: Path
) -> None:
    # (found by the property test) whether `src` holds a `.git` is asked only of the sides
    # where it is a directory: asked of the view, `src/.git` went through a looping link
    view = view_of(repo_dir, tmp_path)
    shutil.rmtree(view.root / "src")
    (view.root / "src").symlink_to("src/main.py")
    got = changed(view, repo_dir)
    assert {p for p, c in got.items() if c.new is not None} == {"src"}
    assert got["src"].new is not None and got["src"].new.kind == "symlink"
