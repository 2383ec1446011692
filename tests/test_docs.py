"""docs/ARCHITECTURE.md names only what exists: every module path, `module.name`, `Class.name`
and `function()` it quotes is found in the source (read with ast, nothing imported), so that
a rename that forgets the docs fails here rather than misleading the next reader."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import gitsess

PACKAGE = Path(gitsess.__file__).parent
ROOT = PACKAGE.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"

QUOTED = re.compile(r"`([^`\n]+)`")
# Quoted names that are not the package's although they look so: files, the standard library.
FILE = re.compile(r".+\.(db|toml|json|log|lock|md|patch|h|c)")
NOT_OURS = {"gc.freeze", "fs.inotify.max_user_watches"}  # Python's gc module, a sysctl
PATH = re.compile(r"(?:gitsess/|tests/|scripts/)?[\w/]+\.py")
# `module.name`, `Class.name`, `name()` (arguments allowed), `gitsess.a.b.c`
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
CALL = re.compile(r"([a-z_]\w*)\(\)")  # a Python call: man pages and C calls carry arguments


class Index:
    """What the package defines: modules by dotted name and by base name, and the names each
    module and class binds."""

    def __init__(self) -> None:
        self.modules: dict[str, set[str]] = {}
        self.by_base: dict[str, list[str]] = defaultdict(list)
        self.classes: dict[str, set[str]] = defaultdict(set)
        self.bases: dict[str, set[str]] = defaultdict(set)
        self.functions: set[str] = set()
        for path in sorted(PACKAGE.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            tree = ast.parse(path.read_text(), str(path))
            self.modules[name] = _bound(tree.body)
            self.by_base[name.rsplit(".", 1)[-1]].append(name)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    self.classes[node.name] |= _bound(node.body) | _attributes(node)
                    self.bases[node.name] |= {b.id for b in node.bases if isinstance(b, ast.Name)}
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    self.functions.add(node.name)
        for name in self.modules:  # a package binds its modules
            parent, _, child = name.rpartition(".")
            if parent in self.modules:
                self.modules[parent].add(child)

    def has(self, dotted: str) -> bool:
        head, *rest = dotted.split(".")
        if head == "gitsess":
            return self._in_module(dotted)
        if head in self.classes and len(rest) == 1:
            return rest[0] in self.members(head)
        return any(
            self._in_module(".".join([module, *rest])) for module in self.by_base.get(head, [])
        )

    def _in_module(self, dotted: str) -> bool:
        if dotted in self.modules:
            return True
        module, _, name = dotted.rpartition(".")
        if module in self.modules:
            return name in self.modules[module]
        outer, _, cls = module.rpartition(".")
        return outer in self.modules and cls in self.classes and name in self.members(cls)

    def members(self, cls: str) -> set[str]:
        """What a class binds, its bases' (the package's) included."""
        names = set(self.classes[cls])
        for base in self.bases[cls] & self.classes.keys():
            names |= self.members(base)
        return names


def _bound(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try):
            names |= _bound(node.body)
    return names


def _attributes(cls: ast.ClassDef) -> set[str]:
    """The attributes its methods set on `self`."""
    return {
        t.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for t in ([*t.elts] if isinstance(t, ast.Tuple) else [t])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def quoted() -> list[str]:
    return QUOTED.findall(DOC.read_text())


def test_every_module_path_the_architecture_names_exists() -> None:
    missing = sorted(
        {
            q
            for q in quoted()
            if PATH.fullmatch(q)
            and not any((base / q).exists() for base in (ROOT, PACKAGE, ROOT / "tests"))
            and not any(PACKAGE.rglob(q))  # a module named from its folder's section
        }
    )
    assert not missing, f"docs/ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_module_is_on_the_folder_map() -> None:
    """The map is where a newcomer looks for the room of a change: a module missing from it is
    a room nobody finds."""
    text = DOC.read_text()
    section = text[text.index("### Modules") : text.index("## Where data lives")]
    named = set(QUOTED.findall(section))
    modules = {
        str(path.relative_to(PACKAGE))
        for path in [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]
        if path.name not in ("__init__.py", "__main__.py") or path.parent.name == "cli"
    }
    missing = sorted(modules - named)
    assert not missing, f"modules missing from docs/ARCHITECTURE.md's folder map: {missing}"


def test_every_dotted_name_and_call_the_architecture_names_exists() -> None:
    index = Index()
    missing = set()
    for q in quoted():
        if PATH.fullmatch(q) or FILE.fullmatch(q) or q in NOT_OURS:
            continue
        dotted = DOTTED.fullmatch(q)
        if dotted is not None and _ours(dotted.group(1), index):
            if not index.has(dotted.group(1)):
                missing.add(q)
            continue
        call = CALL.fullmatch(q)
        if call is not None and call.group(1) not in index.functions:
            missing.add(q)
    assert not missing, f"docs/ARCHITECTURE.md names what does not exist: {sorted(missing)}"


def _ours(dotted: str, index: Index) -> bool:
    """Whether a dotted name claims to be the package's (not os.fsync, PRAGMA x.y, a file)."""
    head, second, *_ = dotted.split(".")
    if head == "gitsess":  # gitsess.<section>.<key> is a git config key
        return f"gitsess.{second}" in index.modules
    return head in index.by_base or head in index.classes


def test_the_check_sees_a_missing_name() -> None:
    index = Index()
    assert index.has("delta.DeltaAt") and index.has("gitsess.overlay.tree")
    assert index.has("Tree.find") and index.has("DeltaAt.live_bytes")  # from a base class
    assert not index.has("gitsess.cli.COMMANDS") and not index.has("history.no_such_thing")
