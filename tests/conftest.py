from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitsess.git.repo import RepoContext, discover

from .leftovers import pytest_configure, pytest_sessionfinish  # noqa: F401  (the plugin's hooks)
from .live_util import InProcess, unmount_all
from .util import make_repo


@pytest.fixture(autouse=True)
def _isolated_user(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the real user's state, git config or sessions."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.com")
    monkeypatch.delenv("GITSESS_SESSION", raising=False)
    monkeypatch.delenv("GITSESS_DIR", raising=False)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    """A repository with one commit on `main`; every session mounted in it is unmounted
    afterwards, even when the test failed."""
    path = make_repo(tmp_path / "repo")
    try:
        yield path
    finally:
        unmount_all(path)


@pytest.fixture
def gs(ctx: RepoContext, capsys: pytest.CaptureFixture[str]) -> InProcess:
    """The CLI run in this process, at the top of `repo`."""
    return InProcess(capsys)


@pytest.fixture
def ctx(repo: Path, monkeypatch: pytest.MonkeyPatch) -> RepoContext:
    """The context of a command run at the top of `repo`."""
    monkeypatch.chdir(repo)
    return discover()
