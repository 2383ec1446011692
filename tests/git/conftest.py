from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .helpers import git, make_repo


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    """A repository on branch main with a few committed files of each kind."""
    return make_repo(tmp_path / "repo")


@pytest.fixture
def run_git() -> Callable[..., str]:
    return git
