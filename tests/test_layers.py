"""The layers of docs/ARCHITECTURE.md, checked on the source: every import statement of the
package (those inside functions too, which is where the lazy ones are) must point down.

    cli -> services -> runtime -> overlay -> git, store      (errors, durable, libc, processes:
                                                              any layer)

And a library that one layer wraps is imported by that layer alone: pygit2 by git/ (the layers
above hold a repository as a handle and get plain values back), rich by cli/.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import gitsess
from tests.util import gitsess as run_gitsess

PACKAGE = Path(gitsess.__file__).parent
BASE = "base"  # the modules at the top of the package, which import no layer

# What each layer may import besides itself and the base modules.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "cli": frozenset({"services"}),
    "services": frozenset({"runtime", "overlay", "git", "store"}),
    "runtime": frozenset({"overlay"}),
    "overlay": frozenset({"git", "store"}),
    "git": frozenset(),
    "store": frozenset(),
    BASE: frozenset(),
}

# Imports that cross a layer on purpose, each with its reason.
EXCEPTIONS = {
    # The entry starts a mounting command's daemon process before any service loads: that
    # process's imports are what session start waits for (see runtime/prestart.py).
    ("gitsess.cli", "gitsess.runtime.prestart"),
    # `python -m gitsess` is the command line.
    ("gitsess.__main__", "gitsess.cli"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    """The modules (or names in them) that `path` imports, wherever the statement is."""
    return imports_in(path.read_text(), str(path))


def imports_in(source: str, path: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            # The package imports itself absolutely only, so that this walk sees every name.
            assert node.level == 0, f"{path}:{node.lineno}: a relative import"
            # `from gitsess.services import live` imports the module gitsess.services.live
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in MAY_IMPORT:
        return parts[1]
    if len(parts) == 2 and parts[1] in MAY_IMPORT and (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return BASE


def crossings() -> Iterator[tuple[str, str]]:
    """(importer, imported) for every import of a gitsess module, one per statement name."""
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for target in imports(path):
            if target == "gitsess" or target.startswith("gitsess."):
                yield importer, target


# The layer that alone imports each wrapped library.
WRAPPED = {"pygit2": "git", "rich": "cli"}


def misplaced_libraries(modules: Iterable[tuple[str, Iterable[str]]]) -> list[str]:
    """`importer imports library` for each import of a wrapped library outside its layer;
    `modules` gives each module's name and what it imports."""
    return sorted(
        {
            f"{importer} imports {target}"
            for importer, targets in modules
            for target in targets
            if WRAPPED.get(target.split(".")[0], layer(importer)) != layer(importer)
        }
    )


def package_imports() -> Iterator[tuple[str, Iterator[str]]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield module_name(path), imports(path)


def allowed(importer: str, target: str) -> bool:
    if any(importer == a and target.startswith(b) for a, b in EXCEPTIONS):
        return True
    mine, theirs = layer(importer), layer(target)
    return theirs in (mine, BASE) or theirs in MAY_IMPORT[mine]


def test_every_import_points_down_the_layers() -> None:
    wrong = sorted({f"{a} imports {b}" for a, b in crossings() if not allowed(a, b)})
    assert wrong == []


def test_pygit2_only_in_git_and_rich_only_in_cli() -> None:
    assert misplaced_libraries(package_imports()) == []


def test_a_wrapped_library_outside_its_layer_is_caught() -> None:
    """Lazy imports too: those inside functions are where the services imported pygit2."""
    lazy = "def f() -> None:\n    import pygit2\n    from pygit2.enums import FileMode\n"
    assert misplaced_libraries([("gitsess.services.apply", imports_in(lazy, "x.py"))]) == [
        "gitsess.services.apply imports pygit2",
        "gitsess.services.apply imports pygit2.enums.FileMode",
    ]
    assert misplaced_libraries([("gitsess.git.objects", imports_in(lazy, "x.py"))]) == []
    assert misplaced_libraries(
        [
            ("gitsess.cli.table", ["rich.table.Table", "click"]),
            ("gitsess.services.live", ["rich.console.Console", "apsw"]),
            ("gitsess.cli", ["pygit2"]),
            ("gitsess.overlay.tree", ["pygit2.Oid"]),
        ]
    ) == [
        "gitsess.cli imports pygit2",
        "gitsess.overlay.tree imports pygit2.Oid",
        "gitsess.services.live imports rich.console.Console",
    ]


def test_the_walk_sees_imports_inside_functions() -> None:
    """The check is only as good as its walk: the entry's prestart, and the lazy imports of
    the services, are imported inside functions."""
    found = set(crossings())
    assert ("gitsess.cli", "gitsess.runtime.prestart") in found
    assert ("gitsess.services.sessions", "gitsess.services.live") in found


def test_a_service_importing_the_command_line_is_caught() -> None:
    assert not allowed("gitsess.services.live", "gitsess.cli.base")
    assert not allowed("gitsess.overlay.tree", "gitsess.services.sessions")
    assert not allowed("gitsess.cli.live_cmds", "gitsess.git.repo.RepoContext")
    assert not allowed("gitsess.git.apply_commit", "gitsess.overlay.view")
    assert allowed("gitsess.cli.live_cmds", "gitsess.errors.GitsessError")


# What the small commands load when they run: the layers above say who may import what, this
# says what `ls`, `show`, `kv` and `--version` must not pay for (pygit2 alone took longer than
# `ls` does; rich and the overlay's tree as long again).
LOADED = """
import contextlib, io, sys
from gitsess.cli.group import run
with contextlib.redirect_stdout(io.StringIO()):
    code = run(sys.argv[1:])
heavy = ("pygit2", "rich", "trio", "pyfuse3", "gitsess.overlay.view", "gitsess.overlay.tree")
print(code, sorted(m for m in sys.modules if m in heavy))
"""


@pytest.mark.parametrize(
    "args", [["ls"], ["ls", "--json"], ["show", "exp"], ["kv", "exp", "get", "k"], ["--version"]]
)
def test_small_commands_import_no_pygit2_rich_or_overlay(repo: Path, args: list[str]) -> None:
    """What they do not use they do not load: pygit2 alone took longer than `ls` does."""
    assert run_gitsess(repo, "new", "exp").returncode == 0
    if args[0] == "kv":
        assert run_gitsess(repo, "kv", "exp", "set", "k", "v").returncode == 0
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *args], cwd=repo, capture_output=True, text=True
    )
    assert done.stdout.split(None, 1) == ["0", "[]\n"], done.stderr


def _loaded(repo: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", LOADED_ALL, *args], cwd=repo, capture_output=True, text=True
    )
    code, loaded = done.stdout.split(None, 1)
    assert code == "0", done.stderr
    return loaded


LOADED_ALL = LOADED.replace("if m in heavy", "if m in heavy or m.startswith('gitsess.overlay.')")


def test_listing_a_session_with_a_delta_loads_no_pygit2_or_rich(repo: Path) -> None:
    """A session that changed nothing is told so by one query of its delta (the overlay's
    tree is not loaded, nor its delta store); once it changed a file its delta is read, and
    git still is not: the branch has not moved and the session never touched its `.git`."""
    assert run_gitsess(repo, "new", "exp").returncode == 0
    assert run_gitsess(repo, "kv", "exp", "set", "k", "v").returncode == 0
    for module in ("gitsess.overlay.tree", "gitsess.overlay.delta", "gitsess.overlay.history"):
        assert module not in _loaded(repo, "ls")
    assert "gitsess.overlay.tree" not in _loaded(repo, "show", "exp")
    kv = _loaded(repo, "kv", "exp", "get", "k")
    assert "gitsess.overlay.kvtable" in kv and "gitsess.overlay.delta" not in kv
    run = run_gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo changed > README.md")
    assert run.returncode == 0, run.stderr
    for args in (["ls"], ["show", "exp"]):
        loaded = _loaded(repo, *args)
        assert "gitsess.overlay.tree" in loaded  # the changes are counted
        assert "pygit2" not in loaded and "rich" not in loaded


# What a session that did nothing yet costs `ls`, `show` and `kv get` beyond the registry: a
# look at its delta through one connection. Each of these was loaded once and took its share
# of their start: the daemon's client (asked only when a daemon holds the session's lock), the
# live services, the delta store with its history and audit log, git's view types and binding.
NOT_FOR_SMALL = (
    "socket",
    "gitsess.runtime.mount",
    "gitsess.overlay.protocol",
    "gitsess.services.live",
    "gitsess.services.timeline",
    "gitsess.overlay.delta",
    "gitsess.overlay.history",
    "gitsess.overlay.retention",
    "gitsess.overlay.view",
    "gitsess.git.view",
    "gitsess.git.binding",
    "gitsess.store.agent_rows",
    "gitsess.services.inspection_fs",
)

LOADED_MODULES = LOADED.replace("if m in heavy", "if m.startswith(('gitsess.', 'json', 'socket'))")


@pytest.mark.parametrize(
    ("args", "also"),
    [
        # the registry's other rows; json, for a table
        (["ls"], ("gitsess.store.rows", "json")),
        (["ls", "--json"], ("gitsess.store.rows",)),
        (["show", "exp"], ()),  # (its runs are rows of the registry's)
        (["kv", "exp", "get", "k"], ("gitsess.store.rows", "gitsess.cli.table")),
    ],
)
def test_small_commands_on_an_idle_session_load_no_daemon_client_or_delta_store(
    repo: Path, args: list[str], also: tuple[str, ...]
) -> None:
    assert run_gitsess(repo, "new", "exp").returncode == 0
    assert run_gitsess(repo, "kv", "exp", "set", "k", "v").returncode == 0
    done = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, *args], cwd=repo, capture_output=True, text=True
    )
    code, loaded = done.stdout.split(None, 1)
    assert code == "0", done.stderr
    assert "gitsess.store.registry" in loaded  # (the check sees what is loaded)
    assert [m for m in (*NOT_FOR_SMALL, *also) if f"'{m}'" in loaded] == []


COUNTED = """
import contextlib, io, json, sys
from gitsess.cli.group import run
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = run(["ls", "--json"])
print(code, "pygit2" in sys.modules, json.loads(out.getvalue())[0]["commits"])
"""


def test_ls_counts_a_sessions_own_commits_again_only_once_its_refs_moved(repo: Path) -> None:
    """pygit2 alone takes longer than `ls`: the count is kept with the refs it follows from
    (HEAD, the real tips, the base), and taken again when one of them moved."""

    def ls() -> list[str]:
        done = subprocess.run([sys.executable, "-c", COUNTED], cwd=repo, capture_output=True)
        return done.stdout.decode().split()

    def commit(name: str) -> None:
        script = f"echo {name} > {name} && git add {name} && git commit -q -m {name}"
        done = run_gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script)
        assert done.returncode == 0, done.stderr

    commit("one")
    assert ls() == ["0", "True", "1"]
    assert ls() == ["0", "False", "1"]
    commit("two")  # its HEAD moved
    assert ls() == ["0", "True", "2"]
    assert ls() == ["0", "False", "2"]
    subprocess.run(["git", "branch", "other"], cwd=repo, check=True)  # a real tip more
    assert ls() == ["0", "True", "2"]
