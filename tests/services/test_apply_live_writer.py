"""apply against a session being written: every committed file is one the session wrote
whole, never bytes of a torn read, and no write of the session's is dropped under it (issue 29
item 9)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.util import git, gitsess

pytestmark = pytest.mark.fuse


def _content(i: int) -> bytes:
    line = f"version {i} ".encode() * 8 + b"\n"
    return line * (40_000 // len(line))  # past the inline limit: a data file


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("applies", [25, pytest.param(300, marks=pytest.mark.slow)])
def test_apply_commit_never_commits_a_torn_file(repo: Path, tmp_path: Path, applies: int) -> None:
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(repo, "new", "exp").returncode == 0
    assert gitsess(repo, "mount", "exp", str(view)).returncode == 0
    stop = threading.Event()
    written: set[bytes] = set()
    errors: list[OSError] = []

    def writer() -> None:
        try:
            write_until_stopped()
        except OSError as e:  # a write of the session's lost (dropped) under it, say
            errors.append(e)

    def write_until_stopped() -> None:
        i = 0
        while not stop.is_set():
            data = _content(i)
            written.add(data)
            tmp = view / f"f{i % 4}.txt.tmp"
            tmp.write_bytes(data)
            os.rename(tmp, view / f"f{i % 4}.txt")  # whole-file replacement, as editors do
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    committed = 0
    try:
        for n in range(applies):
            done = gitsess(repo, "apply", "exp", "--commit", "-m", f"apply {n}")
            assert done.returncode in (0, 1), done.stderr
            assert "Traceback" not in done.stderr, done.stderr
            if done.returncode == 0:
                committed += 1
    finally:
        stop.set()
        thread.join()
        gitsess(repo, "umount", "exp")
    assert committed > 0
    assert errors == []
    names = git(repo, "log", "--format=%H").split()
    for commit_id in names:
        for line in git(repo, "ls-tree", "-r", commit_id).splitlines():
            blob, path = line.split()[2], line.split("\t")[1]
            if path.startswith("f") and path.endswith(".txt"):
                data = subprocess.run(
                    ["git", "cat-file", "blob", blob], cwd=repo, capture_output=True, check=True
                ).stdout
                assert b"\0" not in data, (commit_id, path)
                assert data in written, (commit_id, path)
