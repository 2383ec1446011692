from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import make_repo


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    """A repository on branch main with a few committed files of each kind."""
    return make_repo(tmp_path / "repo")
