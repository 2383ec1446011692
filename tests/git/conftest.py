from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import GIT_ENV, sample_repo


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    """A repository on branch main with a few committed files of each kind."""
    return sample_repo(tmp_path / "repo")
