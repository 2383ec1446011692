from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pygit2

from gitsess.git.changes import compute_changes
from gitsess.git.diff import DiffResult, diff_changes
from gitsess.git.scratch import scratch_repo
from tests.util import git, write

from .dirview import DirView
from .helpers import copy_repo, git_view_diff


def diff_of(repo_dir: Path, view: DirView, *specs: str, binary: bool = False) -> DiffResult:
    repo = pygit2.Repository(str(repo_dir))
    return diff_changes(repo, view, compute_changes(view, repo, pathspecs=specs), binary=binary)


def edit_everything(root: Path) -> None:
    """One of each kind of change git can show."""
    main = (root / "src/main.py").read_text().replace("line 5\n", "line five\n")
    (root / "src/main.py").write_text(main + "tail\n")
    (root / "run.sh").chmod(0o644)
    (root / "README.md").unlink()
    (root / "docs").rename(root / "manual")
    (root / "link").unlink()
    (root / "link").symlink_to("README.md")
    (root / "src/util.py").unlink()
    (root / "src/util.py").symlink_to("main.py")
    blob = bytearray((root / "bin/blob.bin").read_bytes())
    blob[100:110] = b"\xff" * 10
    (root / "bin/blob.bin").write_bytes(bytes(blob))
    write(root, "bin/new.bin", b"\x00\x01\x02" * 50)
    write(root, "notes/todo.txt", "no newline at end")
    write(root, "debug.log", "ignored\n")


def test_name_status_matches_git(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    ours = diff_of(repo_dir, view)
    theirs = git_view_diff(repo_dir, view.root, "-M", "--name-status")
    assert sorted(ours.name_status()) == sorted(theirs.splitlines())
    assert "T\tsrc/util.py" in ours.name_status()
    assert sorted(ours.name_only()) == sorted(
        git_view_diff(repo_dir, view.root, "-M", "--name-only").splitlines()
    )


def test_odd_names_are_quoted_as_git_quotes_them(repo_dir: Path, tmp_path: Path) -> None:
    """One name to a line: a newline, a tab, a quote, a backslash, UTF-8 and bytes that are not
    UTF-8 are quoted with git's C escapes (`core.quotePath`), renames too."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    for name in (b"new\nline", b"tab\there", b'q"uote', b"back\\slash", b"caf\xc3\xa9", b"bad\xff"):
        (view.root / os.fsdecode(name)).write_bytes(b"content of " + name + b"\n")
    (view.root / "README.md").rename(view.root / "READ\x7fME.md")
    ours = diff_of(repo_dir, view)
    for option, lines in (("--name-status", ours.name_status()), ("--name-only", ours.name_only())):
        theirs = git_view_diff(repo_dir, view.root, "-M", option).splitlines()
        assert sorted(lines) == sorted(theirs)
    assert '"new\\nline"' in ours.name_only() and '"bad\\377"' in ours.name_only()


def test_stat_is_gits_at_every_width(repo_dir: Path, tmp_path: Path) -> None:
    """Byte for byte `git diff --stat=W`: renames as `{old => new}`, binary sizes, a type
    change once, names quoted (a newline split a line of libgit2's stat), long names cut."""
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    long = "a/very/long/directory/name/that/goes/on/and/on/forever/file.txt"
    for name in (b"new\nline", b"caf\xc3\xa9", b"bad\xff", long.encode()):
        write(view.root, os.fsdecode(name), b"x\n" * 50)
    repo = pygit2.Repository(str(repo_dir))
    for width in (30, 40, 80, 200):
        ours = diff_changes(repo, view, compute_changes(view, repo), stat_width=width).stat
        assert ours == git_view_diff(repo_dir, view.root, "-M", f"--stat={width}"), width


def test_patch_text_matches_git(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    ours = diff_of(repo_dir, view).patch().decode()
    theirs = git_view_diff(repo_dir, view.root, "-M")
    # same files in the same order, and byte-identical hunks
    assert _split_files(ours).keys() == _split_files(theirs).keys()
    for name, text in _split_files(theirs).items():
        assert _hunks(_split_files(ours)[name]) == _hunks(text), name
    assert "Binary files a/bin/blob.bin and b/bin/blob.bin differ" in ours
    assert "\\ No newline at end of file" in ours


def _split_files(patch: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for chunk in patch.split("diff --git ")[1:]:
        head = chunk.split("\n", 1)[0]
        key = head
        while key in parts:  # a type change is two parts with the same header
            key += "'"
        parts[key] = chunk
    return parts


def _hunks(text: str) -> list[str]:
    """Hunk lines and mode/rename headers; index lines differ in abbreviation only."""
    return [line for line in text.splitlines() if not line.startswith("index ")]


def test_binary_patch_applies_with_git(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    patch = diff_of(repo_dir, view, binary=True).patch()
    assert b"GIT binary patch" in patch
    target = copy_repo(repo_dir, tmp_path / "target")
    git(target, "apply", "--check", input=patch)
    git(target, "apply", input=patch)
    assert git(target, "status", "--porcelain") != ""
    assert (target / "bin/blob.bin").read_bytes() == (view.root / "bin/blob.bin").read_bytes()
    assert (target / "bin/new.bin").read_bytes() == (view.root / "bin/new.bin").read_bytes()
    assert (target / "src/util.py").is_symlink()
    assert not (target / "debug.log").exists()  # ignored: not part of the diff


def test_stat_and_json(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    result = diff_of(repo_dir, view)
    assert "src/main.py" in result.stat
    assert "Bin 2048 -> 2048 bytes" in result.stat
    git_summary = git_view_diff(repo_dir, view.root, "-M", "--shortstat").strip()
    files_changed = int(git_summary.split()[0])
    ours_summary = result.stat.strip().splitlines()[-1]
    assert ours_summary.split()[0] == str(files_changed)  # a type change counted once, as git
    data = json.loads(json.dumps(result.to_json()))
    by_path = {f["path"]: f for f in data["files"]}
    assert by_path["src/main.py"]["additions"] == 2
    assert by_path["src/main.py"]["deletions"] == 1
    assert by_path["run.sh"]["old_mode"] == "100755" and by_path["run.sh"]["new_mode"] == "100644"
    assert by_path["manual/guide.txt"]["status"] == "R"
    assert by_path["manual/guide.txt"]["old_path"] == "docs/guide.txt"
    assert by_path["bin/blob.bin"]["binary"] is True
    assert data["summary"]["changed_files"] == len(data["files"])


def test_renames_can_be_turned_off_and_threshold(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    text = (view.root / "src/main.py").read_text()
    (view.root / "src/main.py").unlink()
    write(view.root, "src/moved.py", text.replace("line 1\n", "line one\n"))
    repo = pygit2.Repository(str(repo_dir))
    cs = compute_changes(view, repo)
    assert diff_changes(repo, view, cs).name_status()[0].startswith("R0")
    assert sorted(diff_changes(repo, view, cs, find_renames=False).name_status()) == [
        "A\tsrc/moved.py", "D\tsrc/main.py",
    ]  # fmt: skip
    strict = diff_changes(repo, view, cs, rename_threshold=100).name_status()
    assert len(strict) == 2


def test_copied_up_identical_file_is_not_in_diff(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    shutil.copy(view.root / "README.md", view.root / "README.tmp")
    (view.root / "README.tmp").replace(view.root / "README.md")
    assert diff_of(repo_dir, view).files == ()


def test_diff_never_writes_into_the_repository(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    write(view.root, "fresh.txt", "brand new content\n")
    before = git(repo_dir, "count-objects", "-v")
    result = diff_of(repo_dir, view, binary=True)
    assert result.name_status() == ["A\tfresh.txt"]
    assert git(repo_dir, "count-objects", "-v") == before


def test_pathspec_limits_diff(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    edit_everything(view.root)
    assert diff_of(repo_dir, view, "src").name_only() == ["src/main.py", "src/util.py"]


def test_mode_change_of_binary_file_applies(repo_dir: Path, tmp_path: Path) -> None:
    view = DirView.copy_of(repo_dir, tmp_path / "view")
    (view.root / "bin/blob.bin").chmod(0o755)
    (view.root / "bin/blob.bin").rename(view.root / "bin/renamed.bin")
    write(view.root, "plain.bin", (view.root / "bin/renamed.bin").read_bytes() + b"\x00")
    patch = diff_of(repo_dir, view, binary=True).patch()
    assert b"Binary files" not in patch
    git(repo_dir, "apply", input=patch)
    assert (repo_dir / "bin/renamed.bin").stat().st_mode & 0o111


def test_scratch_repository_keeps_blobs_in_memory_and_writes_none(repo_dir: Path) -> None:
    repo = pygit2.Repository(str(repo_dir))
    packed = repo.create_blob(b"git packed this\n")
    git(repo_dir, "repack", "-adq")
    had = repo.create_blob(b"git has this\n")  # loose
    objects = git(repo_dir, "count-objects", "-v")
    with scratch_repo(repo) as scratch:
        new = scratch.create_blob(b"new in the session\n")
        assert scratch.create_blob(b"git has this\n") == had
        assert scratch.create_blob("git packed this\n") == packed
        # made here: copied into the repository by an apply; had: never copied, but kept
        assert scratch.created(new) is not None
        assert scratch.created(had) is None and scratch.created(packed) is None
        assert scratch.blob_data(new) == b"new in the session\n"
        assert scratch.blob_data(had) == b"git has this\n"
        assert scratch.blob_data(packed) == b"git packed this\n"
        blob = scratch[new]
        assert isinstance(blob, pygit2.Blob) and blob.data == b"new in the session\n"
        assert new not in repo.odb
    assert git(repo_dir, "count-objects", "-v") == objects
