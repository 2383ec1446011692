"""gitsess runs on its own build of pyfuse3 (the series in patches/pyfuse3/) and refuses any
other in one line: there is no code path for a stock pyfuse3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyfuse3
import pytest

from gitsess.errors import GitsessError
from gitsess.overlay import pyfuse3_build

SERIES = Path(__file__).parents[2] / "patches" / "pyfuse3"


def test_the_build_in_use_has_the_whole_series() -> None:
    assert pyfuse3_build.problem() is None
    pyfuse3_build.require()
    assert getattr(pyfuse3, "GITSESS_PATCHES", None) == pyfuse3_build.PATCHES


def test_the_count_follows_the_series() -> None:
    patches = sorted(p.name for p in SERIES.glob("[0-9][0-9][0-9][0-9]-*.patch"))
    assert len(patches) == pyfuse3_build.PATCHES
    # The marker that sets the count goes last, so every build that has it has the rest.
    assert patches[-1].endswith("-gitsess-marker.patch")
    assert f"GITSESS_PATCHES = {pyfuse3_build.PATCHES}\n" in (SERIES / patches[-1]).read_text()


def test_a_build_of_part_of_the_series_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyfuse3, "GITSESS_PATCHES", pyfuse3_build.PATCHES - 1)
    with pytest.raises(GitsessError) as refused:
        pyfuse3_build.require()
    message = str(refused.value)
    assert f"{pyfuse3_build.PATCHES - 1} of the {pyfuse3_build.PATCHES} patches" in message
    assert "scripts/setup.sh" in message and "\n" not in message


def test_the_daemon_refuses_a_stock_build_in_one_line() -> None:
    """A build without the marker (as stock pyfuse3 has none): the daemon's process stops at
    the import of the FUSE adapter, and its last line, which `mount` reports, names the fix."""
    code = "import pyfuse3\ndel pyfuse3.GITSESS_PATCHES\nimport gitsess.overlay.daemon\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gitsess.errors.GitsessError: pyfuse3 3.5.0 has none of the"), last
    assert last.endswith("run scripts/setup.sh to build it"), last
