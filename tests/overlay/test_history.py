"""Checkpoints of the delta, through the overlay's own `Tree` (no mount): the state at every
checkpoint reads back exactly, a rewind brings it back, and what a rewind replaced comes back
with the next one; a model check compares random sequences with a dict of what the view held."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfuse3 import FileHandleT, InodeT, RequestContext

from gitsess.overlay import history, usage
from gitsess.overlay.content_store import INLINE_MAX
from gitsess.overlay.delta import DeltaAt, DeltaStore
from gitsess.overlay.fs import Filesystem
from gitsess.overlay.nodes import ROOT_INODE, Node
from gitsess.overlay.tree import Tree

View = dict[str, tuple[str, bytes, int]]


@contextmanager
def opened(delta: str, lower: Path) -> Iterator[Tree]:
    store = DeltaStore(delta)
    tree = Tree(store, str(lower), set())
    try:
        yield tree
    finally:
        tree.close()
        store.close()


def view_of(tree: Tree) -> View:
    """Every path of the view: kind, content (a symlink's target) and permission bits."""
    out: View = {}

    def walk(d: Node, at: str) -> None:
        for name, _ in list(tree.children(d)):
            n = tree.find(d.ino, name)
            assert n is not None
            path = f"{at}{name.decode()}"
            a = tree.getattr(n)
            if stat.S_ISDIR(a.mode):
                out[path] = ("d", b"", a.mode & 0o7777)
                walk(n, path + "/")
            elif stat.S_ISLNK(a.mode):
                out[path] = ("l", tree.readlink(n), 0)
            else:
                out[path] = ("f", tree.read(n, 0, a.size), a.mode & 0o7777)

    walk(tree.node(ROOT_INODE), "")
    return out


def at(delta: str, lower: Path, cp: int) -> View:
    store = DeltaAt(delta, cp)
    tree = Tree(store, str(lower), set(), writer=False)
    try:
        return view_of(tree)
    finally:
        tree.close()
        store.close()


def put(tree: Tree, path: str, content: bytes, mode: int = 0o644) -> None:
    parent_path, _, name = path.rpartition("/")
    parent = tree.resolve(parent_path.encode())
    assert parent is not None
    n = tree.find(parent.ino, name.encode())
    if n is None:
        n = tree.create(parent.ino, name.encode(), stat.S_IFREG | mode, 0, 0)
    tree.truncate(n, 0)
    tree.write(n, 0, content)
    tree.setattr(n, mode=stat.S_IFREG | mode)


def remove(tree: Tree, path: str) -> None:
    parent_path, _, name = path.rpartition("/")
    parent = tree.resolve(parent_path.encode())
    assert parent is not None
    n = tree.find(parent.ino, name.encode())
    assert n is not None
    if n.is_dir:
        for child, _ in list(tree.children(n)):
            remove(tree, f"{path}/{child.decode()}")
        tree.rmdir(parent.ino, name.encode())
    else:
        tree.unlink(parent.ino, name.encode())


def mark(tree: Tree) -> int:
    tree.commit(hold_whiteouts=False)
    cp = tree.store.mark("manual", "", always=True)
    assert cp is not None
    return cp.id


def changed_inodes(tree: Tree, cp: int) -> set[int]:
    assert tree.store.history is not None
    return tree.store.history.changed_inodes(cp)


def rewind(tree: Tree, cp: int) -> history.Rewound:
    tree.commit(hold_whiteouts=False)
    done = tree.store.rewind(cp, "rewind")
    tree.reload(done.inodes)
    return done


@pytest.fixture
def lower(tmp_path: Path) -> Path:
    root = tmp_path / "lower"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "kept").write_bytes(b"lower kept\n")
    (root / "big").write_bytes(b"B" * (INLINE_MAX * 3))
    (root / "small").write_bytes(b"lower small\n")
    return root


@pytest.fixture
def delta(tmp_path: Path) -> str:
    (tmp_path / "session").mkdir()
    return str(tmp_path / "session" / "delta.db")


def test_rewind_brings_back_every_kind_of_change(lower: Path, delta: str) -> None:
    with opened(delta, lower) as tree:
        put(tree, "new", b"n" * (INLINE_MAX + 10))
        put(tree, "big", b"edited " * 10_000)
        n = tree.resolve(b"small")
        assert n is not None
        tree.setxattr(n, b"user.k", b"v1")
        first = view_of(tree)
        cp1 = mark(tree)
        put(tree, "new", b"second version" * 3000)
        put(tree, "big", b"x")
        remove(tree, "dir")
        remove(tree, "small")
        tree.mkdir(ROOT_INODE, b"made", 0o755 | stat.S_IFDIR, 0, 0)
        tree.symlink(ROOT_INODE, b"link", b"new", 0, 0)
        second = view_of(tree)
        cp2 = mark(tree)
        put(tree, "new", b"third")
        tree.commit(hold_whiteouts=False)
        third = view_of(tree)

        assert at(delta, lower, cp1) == first
        assert at(delta, lower, cp2) == second
        done = rewind(tree, cp1)
        assert view_of(tree) == first  # the live tree, reloaded
        assert done.operation.before > cp2
        # The state the rewind replaced is a checkpoint of its own: back to it.
        rewind(tree, done.operation.before)
        assert view_of(tree) == third
        rewind(tree, cp2)
        assert view_of(tree) == second
    with opened(delta, lower) as tree:  # and so it stays, read anew from delta.db
        assert view_of(tree) == second
        n = tree.resolve(b"new")
        assert n is not None


def test_no_checkpoint_saves_nothing(lower: Path, delta: str) -> None:
    with opened(delta, lower) as tree:
        put(tree, "big", b"y" * (INLINE_MAX * 2))
        put(tree, "big", b"z" * (INLINE_MAX * 2))
        tree.commit(hold_whiteouts=False)
        c = tree.store.conn
        for table in ("cp_nodes", "cp_dentries", "checkpoints"):
            assert c.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == 0
    assert not os.path.exists(os.path.join(os.path.dirname(delta), history.CP_DIR))


def test_each_key_is_saved_once_per_checkpoint(lower: Path, delta: str) -> None:
    with opened(delta, lower) as tree:
        put(tree, "big", b"1" * (INLINE_MAX * 2))
        mark(tree)
        for i in range(5):
            put(tree, "big", str(i).encode() * (INLINE_MAX * 2))
            tree.commit(hold_whiteouts=False)
        c = tree.store.conn
        assert c.execute("SELECT count(*) FROM cp_nodes").fetchall()[0][0] == 1
        saved = os.listdir(os.path.join(os.path.dirname(delta), history.CP_DIR, "1"))
        assert len(saved) == 1


def test_a_rewind_killed_before_its_renames_completes_on_open(lower: Path, delta: str) -> None:
    with opened(delta, lower) as tree:
        put(tree, "big", b"old" * INLINE_MAX)
        cp = mark(tree)
        put(tree, "big", b"new" * INLINE_MAX)
        tree.commit(hold_whiteouts=False)
        before = view_of(tree)
    store = DeltaStore(delta)
    assert store.history is not None
    # What a kill -9 right after the commit leaves: the copies not yet renamed into place.
    store.history.finish_rewind = lambda: None  # type: ignore[method-assign]
    store.rewind(cp, "rewind")
    store.close()
    assert any(n.endswith(history.REWIND_SUFFIX) for n in os.listdir(Path(delta).parent / "data"))
    with opened(delta, lower) as tree:
        assert view_of(tree)["big"][1] == b"old" * INLINE_MAX
        assert before["big"][1] == b"new" * INLINE_MAX


def test_prune_keeps_the_newest(lower: Path, delta: str) -> None:
    with opened(delta, lower) as tree:
        views = []
        for i in range(5):
            put(tree, "big", str(i).encode() * (INLINE_MAX * 2))
            views.append((mark(tree), view_of(tree)))
            put(tree, "big", b"after")
            tree.commit(hold_whiteouts=False)
        assert tree.store.history is not None
        assert tree.store.history.prune(2, 10**18, 0) == 3
        for cp, view in views[-2:]:
            assert at(delta, lower, cp) == view
        kept = usage.epochs_on_disk(usage.cp_root(tree.store.data_dir))
        assert min(kept) >= views[-2][0]


def test_kept_objects_go_with_the_last_checkpoint(lower: Path, delta: str) -> None:
    """A checkpoint links the store's object files into `kept/`; they stay while any
    checkpoint does (a rewind may need them), and go when the retention drops the last."""
    store = Path(delta).parent / "objects" / "ab"
    store.mkdir(parents=True)
    (store / ("c" * 38)).write_bytes(b"an object")
    kept = Path(delta).parent / "kept" / "ab" / ("c" * 38)
    with opened(delta, lower) as tree:
        for i in range(2):
            put(tree, "a", str(i).encode())
            mark(tree)
        assert tree.store.history is not None
        assert kept.read_bytes() == b"an object"
        assert tree.store.history.prune(1, 10**18, 0) == 1
        assert kept.exists()
        assert tree.store.history.prune(0, 10**18, 0) == 1
        assert not kept.parent.parent.exists()
        assert (store / ("c" * 38)).read_bytes() == b"an object"


NAMES = ["a", "b", "dir/c", "big"]
ops = st.one_of(
    st.tuples(st.just("put"), st.sampled_from(NAMES), st.integers(0, 3 * INLINE_MAX)),
    st.tuples(st.just("rm"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("mark"), st.just(""), st.just(0)),
    st.tuples(st.just("rewind"), st.just(""), st.integers(0, 100)),
)


def _model(ops_list: list[tuple[str, str, int]], lower: Path, delta: str) -> None:
    saved: dict[int, View] = {}
    with opened(delta, lower) as tree:
        for i, (op, path, n) in enumerate(ops_list):
            if op == "put":
                put(tree, path, bytes([65 + i % 26]) * n)
            elif op == "rm" and tree.resolve(path.encode()) is not None:
                remove(tree, path)
            elif op == "mark":
                saved[mark(tree)] = view_of(tree)
            elif op == "rewind" and saved:
                cp = sorted(saved)[n % len(saved)]
                current = view_of(tree)
                done = rewind(tree, cp)
                assert view_of(tree) == saved[cp]
                saved[done.operation.before] = current
                saved[done.operation.after] = saved[cp]
            tree.commit(hold_whiteouts=False)
        final = view_of(tree)
    for cp, view in saved.items():
        assert at(delta, lower, cp) == view
    with opened(delta, lower) as tree:
        assert view_of(tree) == final


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ops, max_size=25))
def test_model(
    tmp_path_factory: pytest.TempPathFactory, ops_list: list[tuple[str, str, int]]
) -> None:
    _run_model(tmp_path_factory, ops_list)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ops, max_size=60))
def test_model_long(
    tmp_path_factory: pytest.TempPathFactory, ops_list: list[tuple[str, str, int]]
) -> None:
    _run_model(tmp_path_factory, ops_list)


def _run_model(factory: pytest.TempPathFactory, ops_list: list[tuple[str, str, int]]) -> None:
    base = factory.mktemp("model")
    root = base / "lower"
    (root / "dir").mkdir(parents=True)
    (root / "a").write_bytes(b"lower a")
    (root / "big").write_bytes(b"L" * (2 * INLINE_MAX))
    (base / "session").mkdir()
    _model(ops_list, root, str(base / "session" / "delta.db"))


def test_a_file_changed_in_place_shows_as_it_was_until_released(lower: Path, delta: str) -> None:
    # What the daemon answers the kernel around a live rewind: the kernel holds each file's
    # size (and some pages) from before, and drops no page on new times alone, so its reads
    # and attributes show the old file until the daemon dropped what the kernel held and
    # released the hold (replaced.py).
    olds = {"inline": b"i2" * 100, "data": b"d2" * INLINE_MAX, "big": b"b2" * INLINE_MAX}
    news = {"inline": b"i1" * 10, "data": b"d1" * (INLINE_MAX * 3), "big": b"B" * (INLINE_MAX * 3)}
    with opened(delta, lower) as tree:
        put(tree, "inline", news["inline"])
        put(tree, "data", news["data"])
        cp = mark(tree)
        for name, content in olds.items():
            put(tree, name, content)  # `big` is the worktree's until now: its copy goes
        fs = Filesystem(tree)
        nodes = {name: tree.resolve(name.encode()) for name in olds}
        for n in nodes.values():
            assert n is not None
            tree.count_lookup(n)  # the kernel holds it
        tree.commit(hold_whiteouts=False)
        tree.hold_replaced(changed_inodes(tree, cp))
        rewind(tree, cp)

        def read(name: str) -> bytes:
            n = nodes[name]
            assert n is not None
            got: object = trio.run(fs.read, FileHandleT(n.ino), 0, 1 << 20)
            if isinstance(got, bytes):
                return got
            # a slice of the worktree file, spliced to the kernel
            fd, off, size = got.fd, got.offset, got.size  # type: ignore[attr-defined]
            return os.pread(fd, size, off)

        def attributes(name: str) -> tuple[int, int]:
            n = nodes[name]
            assert n is not None
            a = trio.run(fs.getattr, InodeT(n.ino), RequestContext())
            return a.st_size, a.st_mtime_ns

        held = {name: attributes(name) for name in olds}
        assert {name: size for name, (size, _) in held.items()} == {
            name: len(content) for name, content in olds.items()
        }
        assert {name: read(name) for name in olds} == olds  # (a GETATTR ended no hold)
        assert sorted(tree.replaced.release_all()) == sorted(n.ino for n in nodes.values() if n)
        for name in olds:
            size, mtime_ns = attributes(name)
            assert size == len(news[name])
            assert mtime_ns != held[name][1]
            assert read(name) == news[name]
        # a write ends the old content too, and forgetting the node lets its descriptor go
        put(tree, "data", olds["data"])
        tree.commit(hold_whiteouts=False)
        tree.hold_replaced(changed_inodes(tree, cp))
        assert len(tree.replaced) == 3
        data = tree.resolve(b"data")
        assert data is not None
        tree.write(data, 0, b"xy")
        assert read("data") == b"xy" + olds["data"][2:]
        big = nodes["big"]
        assert big is not None
        trio.run(fs.forget, [(InodeT(big.ino), 1)])
        assert big.ino not in tree.replaced
