"""The bounded cache of open descriptors: the least recently used one is closed for room."""

from __future__ import annotations

import os

import pytest

from gitsess.overlay.fdcache import FdCache


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_the_least_recently_used_is_closed_for_room() -> None:
    cache = FdCache(2)
    a, b, c = (os.open("/dev/null", os.O_RDONLY) for _ in range(3))
    cache.put(1, a)
    cache.put(2, b)
    assert cache.get(1) == a  # 2 is now the oldest
    cache.put(3, c)
    assert cache.get(2) is None and not _is_open(b)
    assert (cache.get(1), cache.get(3)) == (a, c)
    cache.close_all()
    assert not _is_open(a) and not _is_open(c)


@pytest.mark.parametrize("how", ["put again", "closed"])
def test_a_replaced_or_closed_descriptor_is_closed(how: str) -> None:
    cache = FdCache(4)
    old = os.open("/dev/null", os.O_RDONLY)
    cache.put(1, old)
    if how == "put again":
        new = os.open("/dev/null", os.O_RDONLY)
        cache.put(1, new)
        assert cache.get(1) == new
    else:
        cache.close([1, 2])
        assert cache.get(1) is None
    assert not _is_open(old)
    cache.close_all()
