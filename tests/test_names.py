"""One name per thing (docs/ARCHITECTURE.md, glossary): no two classes of the package share a
name, so that a name read in a traceback, a review or the docs points at one class."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import gitsess

PACKAGE = Path(gitsess.__file__).parent


def class_names() -> dict[str, list[str]]:
    """Every class defined anywhere in the package (nested ones too), by name."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return where


def test_class_names_are_unique_across_the_package() -> None:
    twice = {name: places for name, places in class_names().items() if len(places) > 1}
    assert not twice, f"classes sharing a name: {twice}"


def test_the_walk_sees_the_package_classes() -> None:
    names = class_names()
    assert "GitsessError" in names and "FsmonitorJournal" in names and "ApplyJournal" in names
