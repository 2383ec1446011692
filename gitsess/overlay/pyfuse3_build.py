"""Whether the pyfuse3 in use is gitsess's build: PyPI's 3.5.0 with the series in
patches/pyfuse3/ (scripts/setup.sh builds it). gitsess has no code path for a stock pyfuse3."""

from __future__ import annotations

import pyfuse3

from gitsess.errors import GitsessError

# The patches in patches/pyfuse3/; the series' last one sets pyfuse3.GITSESS_PATCHES to it.
PATCHES = 13


def problem() -> str | None:
    """One line saying why this pyfuse3 will not do; None for gitsess's build."""
    has = getattr(pyfuse3, "GITSESS_PATCHES", 0)
    if has >= PATCHES:
        return None
    which = f"{has} of the {PATCHES}" if has else f"none of the {PATCHES}"
    return (
        f"pyfuse3 {pyfuse3.__version__} has {which} patches of gitsess's series"
        " (patches/pyfuse3/): run scripts/setup.sh to build it"
    )


def require() -> None:
    """Refuse a pyfuse3 that is not gitsess's build."""
    message = problem()
    if message is not None:
        raise GitsessError(message)
