"""`gitsess fs`, the usage in `show`, and drift warnings in `show` and `ls`."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gitsess.git.repo import RepoContext, discover
from gitsess.runtime import mount
from gitsess.services.sessions import create
from tests.live_util import InProcess, call, eventually, follower, run
from tests.util import GITSESS, gitsess

SCRIPT = (
    "echo changed > README.md; printf 'a\\000b\\377' > blob.bin; mkdir -p new/deep; "
    "echo deep > new/deep/file.txt; rm src/app.py; ln -s new/deep/file.txt link; sleep 0.2"
)


def test_fs_of_a_session_that_changed_nothing(ctx: RepoContext, gs: InProcess) -> None:
    create(ctx, "idle")
    listing = gs.json("fs", "idle", "ls")
    assert [(e["name"], e["kind"], e["changed"]) for e in listing] == [
        ("README.md", "file", False),
        ("src", "dir", False),
    ]
    assert gs.ok("fs", "idle", "cat", "src/app.py") == "print('hi')\n"
    assert gs.fails("fs", "idle", "cat", ".git/HEAD") == "gitsess: session idle has no .git/HEAD\n"
    assert gs.fails("fs", "idle", "ls", "../elsewhere").endswith(
        "is outside the worktree of session idle\n"
    )


@pytest.mark.fuse
def test_fs_reads_the_view_without_a_mount(repo: Path, gs: InProcess) -> None:
    run(repo, "exp", SCRIPT)
    listing = {e["name"]: e for e in gs.json("fs", "exp", "ls")}
    assert sorted(listing) == ["README.md", "blob.bin", "link", "new", "src"]
    assert {name for name, e in listing.items() if e["changed"]} == {
        "README.md",
        "blob.bin",
        "link",
        "new",
        "src",  # holds a deletion
    }
    assert listing["link"]["kind"] == "symlink" and listing["link"]["link"] == "new/deep/file.txt"
    assert listing["blob.bin"]["size"] == 4
    assert gs.json("fs", "exp", "ls", "src") == []
    assert [e["path"] for e in gs.json("fs", "exp", "ls", str(repo / "new"))] == ["new/deep"]

    text = gs.ok("fs", "exp", "ls")
    assert "README.md *" in text and "src/ *" in text and "link -> new/deep/file.txt *" in text

    raw = subprocess.run(
        [*GITSESS, "fs", "exp", "cat", "blob.bin"], cwd=repo, capture_output=True, check=True
    )
    assert raw.stdout == b"a\0b\xff"
    assert gs.ok("fs", "exp", "cat", "link") == "deep\n"
    assert gs.ok("fs", "exp", "cat", "./README.md") == "changed\n"
    assert (repo / "README.md").read_text() == "hello\n"
    assert gs.fails("fs", "exp", "cat", "src/app.py") == "gitsess: session exp has no src/app.py\n"
    assert gs.fails("fs", "exp", "cat", "new") == (
        "gitsess: new is a directory (gitsess fs ls lists it)\n"
    )

    readme = gs.json("fs", "exp", "stat", "README.md")
    assert readme["changed"] is True and readme["size"] == len("changed\n")
    assert readme["copied_from"]["size"] == len("hello\n")
    deep = gs.json("fs", "exp", "stat", "new/deep/file.txt")
    assert deep["changed"] is True and deep["copied_from"] is None
    assert "in the session  changed" in gs.ok("fs", "exp", "stat", "README.md")


@pytest.mark.fuse
def test_fs_sees_a_live_session(repo: Path, gs: InProcess) -> None:
    script = "echo live > live.txt; while [ ! -e stop ]; do sleep 0.05; done"
    with follower(repo, "run", "-s", "exp", "--", "sh", "-c", script) as f:
        assert eventually(lambda: gitsess(repo, "fs", "exp", "cat", "live.txt").stdout == "live\n")
        gs.ok("mount", "exp")
        try:
            mnt = Path(json.loads(gs.ok("ps", "--json"))[0]["mountpoint"])
            (mnt / "stop").touch()
            assert f.proc.wait(timeout=30) == 0
        finally:
            gs.ok("umount", "exp")


@pytest.mark.fuse
def test_show_gives_usage(repo: Path, ctx: RepoContext, gs: InProcess) -> None:
    run(repo, "exp", "echo one > one.txt; sleep 0.5")
    run(repo, "exp", "head -c 40000 /dev/urandom > two.txt; exit 0")
    # The daemon stops a moment after the last run left, and closing its store folds the WAL
    # into delta.db: the sizes below are compared once it is gone (a suite run saw the WAL
    # counted by `show` and gone by the time the test looked).
    session_id = gs.json("show", "exp")["id"]
    assert eventually(lambda: mount.status(discover(repo).session_dir(session_id)) is None)
    info = gs.json("show", "exp")
    usage = info["usage"]
    # The first command named the session.
    assert info["title"] == "sh -c echo one > one.txt; sleep 0.5"
    assert usage["runs"] == 2 and usage["running"] == 0
    assert 0.5 <= usage["run_seconds"] < 30
    assert usage["changed_files"] == 2
    delta = ctx.session_dir(info["id"]) / "delta.db"
    on_disk = delta.stat().st_size + (
        Path(f"{delta}-wal").stat().st_size if Path(f"{delta}-wal").exists() else 0
    )
    data = [p.stat().st_blocks * 512 for p in (delta.parent / "data").iterdir()]
    assert len(data) == 1  # two.txt; one.txt is small enough to live in delta.db
    assert usage["delta_bytes"] == on_disk + sum(data) > on_disk > 0
    assert sum(data) < usage["live_bytes"] <= usage["delta_bytes"]
    last = datetime.fromisoformat(usage["last_activity"])
    assert datetime.now(UTC) - timedelta(minutes=1) < last <= datetime.now(UTC)
    assert info["drift"] == []
    text = gs.ok("show", "exp")
    rows = dict(line.split(None, 1) for line in text.splitlines() if line[:1].isalpha())
    assert rows["runs"].startswith("2, ") and rows["runs"].rstrip().endswith("s in all")
    assert rows["delta"].startswith("size ") and rows["last"].startswith("activity ")
    assert "warning" not in text

    create(ctx, "fresh")
    fresh = gs.json("show", "fresh")["usage"]
    assert fresh == {
        "delta_bytes": 0,
        "live_bytes": 0,
        "changed_files": None,
        "runs": 0,
        "running": 0,
        "run_seconds": 0,
        "last_activity": None,
        "bytes_by_kind": None,
        "objects_bytes": 0,
    }


def test_show_counts_the_sessions_git_objects_once(repo: Path, gs: InProcess) -> None:
    """git's objects live beside the delta, in the session's own store: `show` counts them,
    each file once though a checkpoint links it into `kept/`, and no symlink planted there."""
    script = (
        "head -c 300000 /dev/urandom > big.bin && git add big.bin && git commit -qm big"
        " && ln -s $PWD/big.bin .git/objects/planted && mkdir .git/objects/zz"
        " && ln -s $PWD .git/objects/zz/dir"
    )
    run(repo, "exp", script)
    first = gs.json("show", "exp")["usage"]["objects_bytes"]
    assert 300_000 < first < 400_000  # the blob (random bytes do not compress), tree, commit
    assert gs.ok("checkpoint", "exp")
    assert gs.json("show", "exp")["usage"]["objects_bytes"] == first
    rows = dict(line.split("  ", 1) for line in gs.ok("show", "exp").splitlines() if "  " in line)
    assert rows["git objects"].strip().endswith("KiB")


@pytest.mark.fuse
def test_drift_after_editing_the_real_tree(repo: Path, gs: InProcess) -> None:
    run(repo, "exp", "echo session > README.md; echo mine > mine.txt")
    run(repo, "other", "echo other > other.txt")
    gs.ok("mount", "exp")
    try:
        # The real tree changes a path the session changed, and one it did not.
        (repo / "README.md").write_text("real edit\n")
        (repo / "src" / "app.py").write_text("print('real')\n")
        assert eventually(lambda: gs.json("show", "exp")["drift"] != [])
        drift = gs.json("show", "exp")["drift"]
        assert [d["path"] for d in drift] == ["README.md"]
        # The session still reads its own version; the untouched path shows the real edit.
        assert gs.ok("fs", "exp", "cat", "README.md") == "session\n"
        assert gs.ok("fs", "exp", "cat", "src/app.py") == "print('real')\n"
    finally:
        gs.ok("umount", "exp")
    # Recorded in delta.db: the warning stays after unmounting.
    text = gs.ok("show", "exp")
    assert "warning: the real worktree changed 1 path(s)" in text
    assert "  README.md (" in text
    listed = {s["name"]: s["drift"] for s in gs.json("ls")}
    assert listed == {"exp": ["README.md"], "other": []}
    table = gs.ok("ls")
    exp_row = next(line for line in table.splitlines() if " exp " in line)
    assert "! 1 drifted" in exp_row
    assert "! 1 drifted" not in next(line for line in table.splitlines() if " other " in line)
    assert "the real worktree changed paths that the session changed too" in table
    assert "warning" not in gs.ok("show", "other")
    # diff and a dry-run apply warn on stderr; the patch on stdout stays whole.
    for args in (("diff", "exp"), ("apply", "exp", "--patch", "--dry-run")):
        code, out, err = call(gs.capsys, *args)
        assert code == 0, err
        assert args[0] != "diff" or out.startswith("diff --git a/README.md")
        assert "warning: the real worktree also changed (drift): README.md" in err
    _, _, err = call(gs.capsys, "diff", "other")
    assert "drift" not in err
