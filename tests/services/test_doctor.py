from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gitsess.overlay import pyfuse3_build
from gitsess.services import doctor
from tests.util import gitsess

REQUIRED = {
    "/dev/fuse",
    "fusermount3",
    "libfuse",
    "pyfuse3",
    "read-ahead",
    "user namespaces",
    "mount namespaces",
    "git repository",
}


def test_every_check_has_a_verdict_and_a_detail(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(repo)
    checks = doctor.run_checks()
    assert {c.name for c in checks} >= REQUIRED
    for c in checks:
        assert c.verdict in ("ok", "warn", "fail") and c.detail
    repository = next(c for c in checks if c.name == "git repository")
    assert repository.verdict == "ok" and str(repo / ".git") in repository.detail


def test_missing_or_wrong_device(tmp_path: Path) -> None:
    assert doctor.check_dev_fuse(tmp_path / "fuse").verdict == "fail"
    (tmp_path / "plain").write_text("")
    wrong = doctor.check_dev_fuse(tmp_path / "plain")
    assert (wrong.verdict, wrong.detail) == ("fail", "exists but is not a character device")


def test_namespace_probe_reports_failure_without_harming_the_caller() -> None:
    # An invalid flag makes unshare fail with EINVAL in the child; this process is untouched.
    before = os.readlink("/proc/self/ns/mnt")
    failure = doctor.try_in_child(0x7FFFFFFF, remount_private=False)
    assert failure is not None and failure.startswith("unshare: ")
    assert os.readlink("/proc/self/ns/mnt") == before


def test_repository_outside_a_repo_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    [check] = doctor.check_repository()
    assert check.verdict == "warn" and "not a git repository" in check.detail


def test_corrupt_registry_fails(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / ".git" / "gitsess").mkdir()
    (repo / ".git" / "gitsess" / "sessions.db").write_bytes(b"junk" * 300)
    monkeypatch.chdir(repo)
    registry = doctor.check_repository()[1]
    assert registry.verdict == "fail" and "corrupt" in registry.detail


def test_exit_status_follows_the_verdicts(repo: Path) -> None:
    done = gitsess(repo, "doctor", "--json")
    checks = json.loads(done.stdout)
    failed = [c for c in checks if c["verdict"] == "fail"]
    assert done.returncode == (1 if failed else 0)


def test_missing_fusermount_fails_the_run(repo: Path) -> None:
    done = gitsess(repo, "doctor", env={"PATH": "/nonexistent"})
    assert done.returncode == 1
    line = next(x for x in done.stdout.splitlines() if x.startswith("fusermount3"))
    assert "FAIL" in line and "apt-get install fuse3" in line


def test_pyfuse3_build_is_named() -> None:
    check = doctor.check_pyfuse3()
    assert (check.verdict, check.detail) == (
        "ok",
        f"version 3.5.0, gitsess's build (the {pyfuse3_build.PATCHES} patches of patches/pyfuse3/)",
    )


def test_a_build_of_an_older_series_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyfuse3

    monkeypatch.setattr(pyfuse3, "GITSESS_PATCHES", pyfuse3_build.PATCHES - 1)
    check = doctor.check_pyfuse3()
    assert check.verdict == "fail" and check.detail == pyfuse3_build.problem()


def test_a_stock_build_fails_and_read_ahead_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyfuse3

    monkeypatch.delattr(pyfuse3, "GITSESS_PATCHES")
    check = doctor.check_pyfuse3()
    assert check.verdict == "fail"
    assert check.detail.startswith("pyfuse3 3.5.0 has none of the")
    assert doctor.check_read_ahead().detail.startswith("needs gitsess's build of pyfuse3")


@pytest.mark.skipif(os.geteuid() != 0, reason="as root, views read ahead more")
def test_read_ahead_needs_a_writable_sysfs(tmp_path: Path) -> None:
    assert doctor.check_read_ahead().verdict == "ok"
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "none", tmp_path], check=True)
    try:
        check = doctor.check_read_ahead(tmp_path)
    finally:
        subprocess.run(["umount", "-l", tmp_path], check=True)
    assert check.verdict == "warn" and "is read-only: views keep 128 KiB" in check.detail
