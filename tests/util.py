"""Helpers for tests: real git repositories and the real gitsess program."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

GITSESS = [sys.executable, "-m", "gitsess"]


class Link(str):
    """A symlink's target, as a value of `make_repo`'s files."""


def git(
    cwd: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    raw: bool = False,
) -> str:
    """The real git's output, stripped (`raw`: as it printed it); a failure fails the test."""
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        input=input,
        capture_output=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"git {' '.join(args)} failed ({done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')}\n{done.stderr.decode(errors='replace')}"
        )
    out = done.stdout.decode(errors="surrogateescape")
    return out if raw else out.strip()


def write(root: Path, rel: str, data: bytes | str, mode: int | None = None) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)


SMALL_REPO = {"README.md": "hello\n", "src/app.py": "print('hi')\n"}


def make_repo(
    path: Path,
    files: Mapping[str, bytes | str] = SMALL_REPO,
    *,
    executable: Sequence[str] = (),
) -> Path:
    """A repository on branch `main` with one commit holding `files` (a `Link` value is a
    symlink), those named in `executable` with their x bits."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, data in files.items():
        if isinstance(data, Link):
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).symlink_to(data)
        else:
            write(path, rel, data, 0o755 if rel in executable else None)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial", "--allow-empty")
    return path


def commit(repo: Path, name: str, text: str, message: str = "change") -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def gitsess(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the gitsess program as a user would."""
    return subprocess.run(
        [*GITSESS, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with the content of its regular files, to compare before/after."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def renameat2(old: bytes, new: bytes, flags: int) -> None:
    """rename(2) with RENAME_NOREPLACE / RENAME_EXCHANGE, which os.rename cannot express."""
    import ctypes

    from gitsess.libc import LIBC

    if LIBC.renameat2(-100, old, -100, new, ctypes.c_uint(flags)) != 0:  # AT_FDCWD
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def into_the_past(worktree: Path, when: float) -> None:
    """Every file and directory of `worktree` (its `.git` aside) and the worktree itself
    timed at `when`: what git records of them then is not racily clean."""
    for top, dirs, files in os.walk(worktree, topdown=False):
        if ".git" in Path(top).parts:
            continue
        for name in files + dirs:
            if name != ".git":
                os.utime(os.path.join(top, name), (when, when), follow_symlinks=False)
    os.utime(worktree, (when, when))
