"""Tools that copy permissions through POSIX ACLs keep them in a view as on a plain directory
(issue 29 item 13)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path

import pytest

from gitsess.overlay import acl
from tests.overlay.conftest import Mounted


def _modes(root: Path, names: list[str]) -> dict[str, int]:
    return {n: stat.S_IMODE((root / n).stat().st_mode) for n in names}


def _tools(root: Path) -> None:
    """GNU sed -i, cp -p and install on an executable, a private and a plain file."""
    for name, mode in (("tool.sh", 0o755), ("secret", 0o640), ("plain", 0o644)):
        (root / name).write_text("a\n")
        os.chmod(root / name, mode)
    for name in ("tool.sh", "secret", "plain"):
        subprocess.run(["sed", "-i", "s/a/b/", name], cwd=root, check=True)
        subprocess.run(["cp", "-p", name, f"{name}.copy"], cwd=root, check=True)
    subprocess.run(["install", "-m", "750", "plain", "installed"], cwd=root, check=True)


def test_sed_cp_install_keep_modes_as_on_a_plain_directory(
    mounted: Mounted, tmp_path: Path
) -> None:
    plain = tmp_path / "plain-dir"
    plain.mkdir()
    _tools(plain)
    _tools(mounted.mnt)
    names = sorted(os.listdir(plain))
    assert _modes(mounted.mnt, names) == _modes(plain, names)
    assert _modes(mounted.mnt, ["tool.sh"]) == {"tool.sh": 0o755}


def _acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


MINIMAL = _acl((acl.USER_OBJ, 7, 0), (acl.GROUP_OBJ, 5, 0), (acl.OTHER, 1, 0))
EXTENDED = _acl(
    (acl.USER_OBJ, 6, 0), (acl.USER, 4, 1234), (acl.GROUP_OBJ, 4, 0), (acl.MASK, 4, 0),
    (acl.OTHER, 0, 0),
)  # fmt: skip


def test_an_access_acl_sets_the_mode_and_only_an_extended_one_is_kept(
    mounted: Mounted, tmp_path: Path
) -> None:
    plain = tmp_path / "plain-dir"
    plain.mkdir()
    for root in (plain, mounted.mnt):
        for name, value in (("minimal", MINIMAL), ("extended", EXTENDED)):
            (root / name).write_text("x\n")
            os.chmod(root / name, 0o600)
            os.setxattr(root / name, acl.ACCESS, value)
    assert _modes(mounted.mnt, ["minimal", "extended"]) == {"minimal": 0o751, "extended": 0o640}
    assert _modes(plain, ["minimal", "extended"]) == _modes(mounted.mnt, ["minimal", "extended"])
    for root in (plain, mounted.mnt):
        assert acl.ACCESS.decode() not in os.listxattr(root / "minimal")
        with pytest.raises(OSError) as e:
            os.setxattr(root / "minimal", acl.ACCESS, b"\x02\x00\x00\x00junk")
        assert e.value.errno == errno.EINVAL


@pytest.mark.skipif(shutil.which("sed") is None, reason="needs GNU sed")
def test_a_worktree_script_edited_with_sed_stays_executable(mounted: Mounted) -> None:
    script = mounted.lower / "run.sh"
    script.write_text("echo a\n")
    script.chmod(0o755)
    subprocess.run(["sed", "-i", "s/a/b/", "run.sh"], cwd=mounted.mnt, check=True)
    assert stat.S_IMODE((mounted.mnt / "run.sh").stat().st_mode) == 0o755


def test_the_mode_an_acl_gives_is_seen_at_once(mounted: Mounted) -> None:
    """The kernel keeps the attributes it cached from `sed`'s temporary file (0600) for the
    attribute timeout unless told: stat right after must see the mode the ACL gave (issue 37,
    item 17)."""
    (mounted.mnt / "run.sh").write_text("a\n")
    os.chmod(mounted.mnt / "run.sh", 0o755)
    script = (
        "sed -i s/a/b/ run.sh && stat -c %a run.sh && test -x run.sh && echo x; "
        "cp -p run.sh copy.sh && stat -c %a copy.sh; "
        "install -m 750 run.sh installed && stat -c %a installed"
    )
    done = subprocess.run(["sh", "-c", script], cwd=mounted.mnt, capture_output=True, text=True)
    assert done.stdout.split() == ["755", "x", "755", "750"], done.stderr
