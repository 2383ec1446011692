"""Bad input through the real program: one line on stderr, non-zero exit, nothing changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.util import GITSESS, git, gitsess, snapshot


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode == 1, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gitsess: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_outside_a_repository(tmp_path: Path) -> None:
    for args in (["new", "x"], ["ls"], ["show", "-1"], ["rm", "x"]):
        assert_one_line_error(gitsess(tmp_path, *args), "not a git repository")
    assert snapshot(tmp_path) == {}


def test_bare_repository(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    before = snapshot(tmp_path / "bare.git")
    assert_one_line_error(gitsess(tmp_path / "bare.git", "new", "x"), "bare repository")
    assert snapshot(tmp_path / "bare.git") == before


@pytest.mark.parametrize("name", ["a/b", "..", "a..b", "-x", "x.lock", "é"])
def test_invalid_name(repo: Path, name: str) -> None:
    done = gitsess(repo, "new", "--", name)
    assert_one_line_error(done, "invalid session name")
    assert not (repo / ".git" / "gitsess").exists()


def test_offset_past_the_end_and_unknown_names(repo: Path) -> None:
    assert gitsess(repo, "new", "only").returncode == 0
    before = snapshot(repo / ".git" / "gitsess")
    assert_one_line_error(gitsess(repo, "show", "-2"), "no session -2", "only 1 session")
    assert_one_line_error(gitsess(repo, "rm", "-s", "-5"), "no session -5")
    assert_one_line_error(gitsess(repo, "rename", "nope", "x"), "no session 'nope'")
    assert_one_line_error(gitsess(repo, "new", "only"), "already exists")
    assert snapshot(repo / ".git" / "gitsess") == before


def test_ambiguous_prefix(repo: Path) -> None:
    for suffix in ("1", "2"):
        uuid = f"abcd{suffix * 4}-0000-4000-8000-000000000000"
        assert gitsess(repo, "new", uuid).returncode == 0
    before = snapshot(repo / ".git" / "gitsess")
    done = gitsess(repo, "rm", "abcd")
    assert_one_line_error(done, "ambiguous", "abcd1111", "abcd2222")
    assert snapshot(repo / ".git" / "gitsess") == before


@pytest.mark.parametrize("args", [["ls"], ["new", "x"], ["show", "-1"], ["rm", "x"]])
def test_corrupt_registry(repo: Path, args: list[str]) -> None:
    state = repo / ".git" / "gitsess"
    state.mkdir()
    (state / "sessions.db").write_bytes(b"\x00garbage\xff" * 500)
    before = snapshot(state)
    assert_one_line_error(gitsess(repo, *args), "sessions.db is corrupt")
    assert snapshot(state) == before


def test_unreadable_registry_path(repo: Path) -> None:
    (repo / ".git" / "gitsess" / "sessions.db").mkdir(parents=True)
    assert_one_line_error(gitsess(repo, "new", "x"), "sessions.db")


def test_read_only_state_dir(repo: Path) -> None:
    """The state dir on a read-only filesystem (a read-only bind mount in a private mount
    namespace, so nothing outside the test sees it)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    assert gitsess(repo, "new", "first").returncode == 0
    state = repo / ".git" / "gitsess"
    before = snapshot(state)
    script = (
        f'mount --bind "{state}" "{state}" && mount -o remount,bind,ro "{state}" || exit 99; '
        f'exec "{sys.executable}" -m gitsess "$@"'
    )
    for args in (["new", "second"], ["rm", "first"], ["rename", "first", "renamed"]):
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", script, "sh", *args],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 99 or "unshare failed" in done.stderr:
            pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")
        assert_one_line_error(done, "read-only file system")
    assert snapshot(state) == before
    listed = gitsess(repo, "ls", "--json")
    assert '"name": "first"' in listed.stdout


def test_no_traceback_for_usage_errors(repo: Path) -> None:
    done = subprocess.run(
        [*GITSESS, "show", "--bogus"], cwd=repo, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "No such option" in done.stderr and "Traceback" not in done.stderr
