"""Isolation roots on disk: seeding, the lock, refresh sweeps, purging."""

from __future__ import annotations

import os
import shutil
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.services.agents import roots
from gitsess.store.agent_rows import Participant, Seed


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "shared"
    (src / "settings").mkdir(parents=True)
    (src / "auth.json").write_text("token-1")
    (src / "auth.json").chmod(0o600)
    (src / "settings" / "a.json").write_text("a")
    (src / "settings" / ".b.json").write_text("b")
    (src / "plugins").mkdir()
    (src / "plugins" / "p").write_text("plugin")
    return src


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def new_root(state: Path, name: str) -> Path:
    root = roots.root_of(state, name)
    roots.create_root(root)
    return root


def participant(uuid: str, seeded: list[Seed]) -> Participant:
    return Participant(
        id=1,
        session_id="s",
        role=uuid,
        kind="k",
        isolation_uuid=uuid,
        root=Path("/unused"),
        lever="{}",
        seeded=tuple(seeded),
        pid=None,
        state="idle",
        started_at=datetime.now(UTC),
        ended_at=None,
    )


def test_roots_are_private_and_never_taken_over(state: Path) -> None:
    root = new_root(state, "r1")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700
    with pytest.raises(GitsessError, match="already exists"):
        roots.create_root(root)


def test_the_lock_is_held_until_its_holder_closes_it(state: Path) -> None:
    root = new_root(state, "r1")
    fd = roots.try_lock(root)
    assert fd is not None
    assert roots.try_lock(root) is None
    os.close(fd)
    again = roots.try_lock(root)
    assert again is not None
    os.close(again)


def test_seeding_links_what_exists_and_lists_what_does_not(state: Path, source: Path) -> None:
    root = new_root(state, "r1")
    seeds = roots.seed(root, source, ["auth.json", "settings/*", "plugins", "nope.json", "x/*"])
    assert {(s.path, s.status) for s in seeds} == {
        ("auth.json", "linked"),
        ("settings/.b.json", "linked"),
        ("settings/a.json", "linked"),
        ("plugins", "linked"),
        ("nope.json", "missing"),
        ("x/*", "missing"),
    }
    assert os.readlink(root / "auth.json") == str(source / "auth.json")
    assert (root / "settings").is_dir() and not (root / "settings").is_symlink()
    assert (root / "plugins" / "p").read_text() == "plugin"
    assert not os.path.lexists(root / "nope.json")


def test_seeding_again_keeps_the_agents_own_files(state: Path, source: Path) -> None:
    root = new_root(state, "r1")
    (root / "settings").mkdir()
    (root / "settings" / "a.json").write_text("mine")
    os.symlink("/elsewhere", root / "auth.json")
    seeds = roots.seed(root, source, ["auth.json", "settings/a.json"])
    assert [s.status for s in seeds] == ["linked", "private"]
    assert os.readlink(root / "auth.json") == str(source / "auth.json")
    assert (root / "settings" / "a.json").read_text() == "mine"
    # An original that went away is no longer linked: nothing writes one through the root.
    (source / "auth.json").unlink()
    assert [s.status for s in roots.seed(root, source, ["auth.json"])] == ["missing"]
    assert not os.path.lexists(root / "auth.json")


def refresh_in(root: Path, name: str, text: str) -> None:
    """What a CLI does: write a temp file, rename it over the (linked) credential."""
    tmp = root / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, root / name)


def test_a_refreshed_seed_goes_back_to_the_original_and_every_root(
    state: Path, source: Path
) -> None:
    r1, r2, r3 = (new_root(state, n) for n in ("r1", "r2", "r3"))
    rows = [participant(r.name, roots.seed(r, source, ["auth.json"])) for r in (r1, r2, r3)]
    before = (source / "auth.json").stat()
    refresh_in(r1, "auth.json", "token-2")
    os.utime(r1 / "auth.json", ns=(before.st_mtime_ns + 10**9,) * 2)
    refresh_in(r3, "auth.json", "token-stale")
    os.utime(r3 / "auth.json", ns=(before.st_mtime_ns - 10**9,) * 2)

    [done] = roots.sweep(rows, state)
    assert done.copied_from == r1 / "auth.json"
    assert set(done.relinked) == {r1 / "auth.json", r3 / "auth.json"}
    assert (source / "auth.json").read_text() == "token-2"
    assert stat.S_IMODE((source / "auth.json").stat().st_mode) == 0o600
    for r in (r1, r2, r3):
        assert (r / "auth.json").is_symlink() and (r / "auth.json").read_text() == "token-2"
    assert not [p for p in source.iterdir() if p.name.startswith(".")]  # no temp file left
    assert roots.sweep(rows, state) == []


def test_an_older_or_identical_replacement_is_only_linked_again(state: Path, source: Path) -> None:
    r1 = new_root(state, "r1")
    rows = [participant("r1", roots.seed(r1, source, ["auth.json"]))]
    inode = (source / "auth.json").stat().st_ino
    refresh_in(r1, "auth.json", "token-1")
    [done] = roots.sweep(rows, state)
    assert done.copied_from is None and done.relinked == (r1 / "auth.json",)
    assert (source / "auth.json").stat().st_ino == inode


def test_a_refresh_through_a_symlinked_original_updates_the_real_file(
    state: Path, source: Path, tmp_path: Path
) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (source / "auth.json").rename(dotfiles / "auth.json")
    os.symlink(dotfiles / "auth.json", source / "auth.json")
    r1 = new_root(state, "r1")
    rows = [participant("r1", roots.seed(r1, source, ["auth.json"]))]
    refresh_in(r1, "auth.json", "token-2")
    roots.sweep(rows, state)
    assert (source / "auth.json").is_symlink()  # the user's dotfile link stays
    assert (dotfiles / "auth.json").read_text() == "token-2"


def test_purge_leaves_every_original_intact(
    state: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = new_root(state, "r1")
    roots.seed(root, source, ["auth.json", "settings/*", "plugins"])
    (root / "conversations" / "locked").mkdir(parents=True)
    (root / "conversations" / "locked" / "c.jsonl").write_text("{}")
    (root / "conversations" / "locked").chmod(0o500)
    (root / "conversations").chmod(0o500)
    before = {p: (p.lstat().st_ino, p.read_bytes()) for p in source.rglob("*") if p.is_file()}
    rmtree = shutil.rmtree

    def as_a_user(path: Path) -> None:
        """Root ignores permission bits; a user cannot empty a read-only directory."""
        for p in [path, *path.rglob("*")]:
            if not p.is_symlink() and p.is_dir() and not p.stat().st_mode & 0o200:
                raise PermissionError(13, "Permission denied", str(p))
        rmtree(path)

    monkeypatch.setattr(shutil, "rmtree", as_a_user)
    roots.purge(root)
    assert not root.exists()
    assert {p: (p.lstat().st_ino, p.read_bytes()) for p in before} == before
    assert (source / "plugins").is_dir()
    roots.purge(root)  # gone already: nothing to do
