"""Who a commit is by, as the layers above name it: a name and an address, the time being
that of the commit (git/objects.py makes the signature)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Person:
    name: str
    email: str
