"""Files too big to hold: diff, patch, apply and restore read them in parts, keep the CLI's
memory bounded whatever their size, and still give git's results (issue 29 item 17)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.git.scratch import BIG_FILE
from tests.util import GITSESS, git, gitsess

pytestmark = pytest.mark.fuse

# The CLI's peak RSS, whatever the file's size.
RSS_LIMIT_KB = 150 * 1024
# Peak RSS of a command, as its parent sees it: the one child this wrapper waits for.
RSS_OF = (
    "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]);"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)"
)


def _lines(tag: str, size: int) -> Iterator[bytes]:
    line_no = 0
    written = 0
    while written < size:
        block = b"".join(b"line %12d of %s\n" % (line_no + i, tag.encode()) for i in range(4096))
        block = block[: size - written]
        yield block
        written += len(block)
        line_no += 4096


def _write(path: Path, tag: str, size: int) -> str:
    sha = hashlib.sha1()
    with open(path, "wb") as f:
        for block in _lines(tag, size):
            f.write(block)
            sha.update(block)
    return sha.hexdigest()


def _sha(path: Path) -> str:
    sha = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _rss_kb(repo: Path, *args: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", RSS_OF, *GITSESS, *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rss, code = done.stdout.split()[-2:]
    assert code == "0", done.stderr
    return int(rss)


def _session_with_big_files(repo: Path, tmp_path: Path, size: int) -> dict[str, str]:
    """Session `exp` edits a tracked big file in place and creates another; their digests."""
    _write(repo / "big.txt", "the original", size)
    git(repo, "add", "big.txt")
    git(repo, "commit", "-q", "-m", "a big file")
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(repo, "new", "exp").returncode == 0
    assert gitsess(repo, "mount", "exp", str(view)).returncode == 0
    try:
        with open(view / "big.txt", "r+b") as f:
            f.seek(size // 2)
            f.write(b"CHANGED IN THE SESSION")
        digests = {"big.txt": _sha(view / "big.txt")}
        digests["new.txt"] = _write(view / "new.txt", "the session", size)
    finally:
        assert gitsess(repo, "umount", "exp").returncode == 0
    return digests


def _check_all(repo: Path, tmp_path: Path, size: int) -> None:
    digests = _session_with_big_files(repo, tmp_path, size)
    assert _rss_kb(repo, "diff", "exp", "--stat") < RSS_LIMIT_KB
    stat = gitsess(repo, "diff", "exp", "--stat").stdout
    assert f"Bin {size} -> {size} bytes" in stat and f"Bin 0 -> {size} bytes" in stat
    patch = tmp_path / "out.patch"
    assert _rss_kb(repo, "apply", "exp", "--patch", "-o", str(patch)) < RSS_LIMIT_KB
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(repo), str(other))
    git(other, "apply", str(patch))
    assert {p: _sha(other / p) for p in digests} == digests
    assert _rss_kb(repo, "fork", "exp", "exp2") < RSS_LIMIT_KB
    assert _rss_kb(repo, "apply", "exp", "--commit", "-m", "big") < RSS_LIMIT_KB
    assert {p: _sha(repo / p) for p in digests} == digests
    assert git(repo, "status", "--porcelain") == ""
    assert _rss_kb(repo, "apply", "exp2", "--worktree", "--force") < RSS_LIMIT_KB
    assert {p: _sha(repo / p) for p in digests} == digests
    # rm archives what the session holds; restore lays it back, a part at a time.
    assert gitsess(repo, "new", "exp3").returncode == 0
    view = tmp_path / "view"
    assert gitsess(repo, "mount", "exp3", str(view)).returncode == 0
    try:
        kept = _write(view / "kept.txt", "an archived session", size)
    finally:
        assert gitsess(repo, "umount", "exp3").returncode == 0
    assert _rss_kb(repo, "rm", "exp3") < RSS_LIMIT_KB
    assert _rss_kb(repo, "restore", "exp3") < RSS_LIMIT_KB
    assert gitsess(repo, "mount", "exp3", str(view)).returncode == 0
    try:
        assert _sha(view / "kept.txt") == kept
    finally:
        assert gitsess(repo, "umount", "exp3").returncode == 0


@pytest.mark.timeout(300)
def test_big_files_go_through_every_command_in_bounded_memory(repo: Path, tmp_path: Path) -> None:
    size = 24 << 20
    assert size > BIG_FILE
    _check_all(repo, tmp_path, size)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_files_of_300_mb_go_through_every_command_in_bounded_memory(
    repo: Path, tmp_path: Path
) -> None:
    _check_all(repo, tmp_path, 300 << 20)
