"""Building test repositories with the real git, and looking at trees."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from tests.util import Link, git, make_repo

# The people git records in these tests: distinct author and committer, so that a test sees
# which of the two an operation kept (the `git_identity` fixture of conftest.py sets them).
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
}

# A small mix of what a worktree holds: text, binary, nested, ignored patterns, an executable
# and a symlink.
SAMPLE: dict[str, bytes | str] = {
    "README.md": "# demo\n\nsome text\n",
    "src/main.py": "".join(f"line {i}\n" for i in range(40)),
    "src/util.py": "def f():\n    return 1\n",
    "docs/guide.txt": "guide\n" * 10,
    "bin/blob.bin": bytes(range(256)) * 8,
    "run.sh": "#!/bin/sh\necho hi\n",
    ".gitignore": "*.log\nbuild/\n",
    "link": Link("src/main.py"),
}


def sample_repo(path: Path) -> Path:
    """`SAMPLE` committed, with the author as the repository's user (for what reads config)."""
    repo = make_repo(path, SAMPLE, executable=("run.sh",))
    git(repo, "config", "user.name", GIT_ENV["GIT_AUTHOR_NAME"])
    git(repo, "config", "user.email", GIT_ENV["GIT_AUTHOR_EMAIL"])
    return repo


def copy_repo(src: Path, dest: Path) -> Path:
    """A full copy (with .git), keeping times so that lstat-based checks see the same files."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def tree_state(root: Path, *, git_only: bool = False) -> dict[str, tuple[str, int, bytes]]:
    """path -> (kind, permission bits, content or link target), `.git` left out.

    With `git_only`: only files and symlinks, and only the bits git keeps (executable or not).
    """
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            st = full.lstat()
            perm = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", 0 if git_only else perm, os.fsencode(full.readlink()))
            elif stat.S_ISDIR(st.st_mode):
                if not git_only:
                    out[rel] = ("dir", perm, b"")
            else:
                bits = (0o755 if perm & 0o100 else 0o644) if git_only else perm
                out[rel] = ("file", bits, full.read_bytes())
    return out


def git_view_diff(repo: Path, view: Path, *args: str) -> str:
    """What real git says about the view against HEAD: `git add -A` of the view into a scratch
    index, then `git diff --cached ARGS`. The view's own .gitignore files count, as in gitsess."""
    return _in_scratch_index(repo, view, "diff", "--cached", *args)


def git_view_tree(repo: Path, view: Path) -> str:
    """The tree id git would commit for the view: tracked and untracked-not-ignored files."""
    return _in_scratch_index(repo, view, "write-tree").strip()


def _in_scratch_index(repo: Path, view: Path, *args: str) -> str:
    index = view.parent / f".{view.name}.index"
    env = {"GIT_INDEX_FILE": str(index)}
    where = ("--git-dir", str(repo / ".git"), "--work-tree", str(view))
    try:
        git(view, *where, "read-tree", "HEAD", env=env)
        git(view, *where, "add", "-A", env=env)
        return git(view, *where, *args, env=env, raw=True)
    finally:
        index.unlink(missing_ok=True)
