"""Helpers for tests: real git repositories and the real gitsess program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GITSESS = [sys.executable, "-m", "gitsess"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)} failed: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path) -> Path:
    """A repository on branch `main` with one commit."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hi')\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
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
