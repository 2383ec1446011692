#!/usr/bin/env python3
"""The daemon's Python CPU per name of a cold `git status`, in process, without FUSE.

A `Filesystem` over a `Tree` of a generated worktree (as the daemon builds them), whose
handlers are called directly, as the kernel would call them after its caches were dropped:

- lookup-first: a LOOKUP of every directory and file (git's lstat of each tracked path), then
  the READDIRPLUS of every directory (all its names held: sent by name alone), then a FORGET of
  everything (the next cold run);
- readdir-first: the READDIRPLUS of every directory, top down (every entry built), then the
  FORGETs.

A directory's READDIRPLUS are two: one with every entry, one that finds the end.

A cold status in a view is a mix of the two (which comes first for a name is the race between
git's lookups and the listings ahead). CPU is the main thread's (`time.thread_time`: the C
listing threads of `ListAhead` work on the other core), per name, the median of `--runs`
repetitions after one untimed. The kernel's replies are stood in for by a Python function.

    .venv/bin/python scripts/measure_names.py [--dirs 400] [--per-dir 12] [--runs 15]
        [--profile FILE]

Timings depend on the machine and its load: read them, never assert them in tests.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pyfuse3
from pyfuse3 import EntryAttributes, FileHandleT, FileNameT, InodeT, ReaddirToken, RequestContext

from gitsess.overlay import fs
from gitsess.overlay.delta import DeltaStore
from gitsess.overlay.listahead import ListAhead
from gitsess.overlay.nodes import ROOT_INODE
from gitsess.overlay.tree import Tree


def make_worktree(root: Path, dirs: int, per_dir: int) -> list[bytes]:
    """`dirs` directories two levels deep with `per_dir` files each (and a git dir); the
    files' view paths, sorted as git's index has them."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    rels: list[bytes] = []
    for d in range(dirs):
        sub = root / f"src{d // 20:02d}" / f"mod{d:03d}"
        sub.mkdir(parents=True)
        for f in range(per_dir):
            (sub / f"file{f:02d}.py").write_bytes(b"x" * (100 + f))
            rels.append(os.fsencode(sub.relative_to(root) / f"file{f:02d}.py"))
    return sorted(rels)


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a handler to its end: they never suspend (the host loop runs them so too)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("a handler suspended")


class Kernel:
    """What the kernel holds: lookups counted per inode, the inodes of directories."""

    def __init__(self, filesystem: fs.Filesystem) -> None:
        self.fs = filesystem
        self.lookups: dict[int, int] = {}
        self.dirs: dict[bytes, int] = {b"": ROOT_INODE}
        self.replies = 0
        ctx = RequestContext()
        self._ctx = ctx

    def held(self, e: EntryAttributes) -> None:
        self.lookups[e.st_ino] = self.lookups.get(e.st_ino, 0) + 1

    def lookup_path(self, rel: bytes) -> None:
        parent, _, name = rel.rpartition(b"/")
        if parent not in self.dirs:
            self.lookup_path(parent)
        e = drive(self.fs.lookup(InodeT(self.dirs[parent]), FileNameT(name), self._ctx))
        self.held(e)
        if e.st_mode & 0o170000 == 0o040000:
            self.dirs[rel] = e.st_ino

    def readdir(self, rel: bytes) -> list[tuple[bytes, int, bool]]:
        listed: list[tuple[bytes, int, bool]] = []

        last = 0

        def full(_t: object, name: bytes, e: EntryAttributes, cookie: int) -> bool:
            nonlocal last
            self.held(e)
            listed.append((name, e.st_ino, e.st_mode & 0o170000 == 0o040000))
            last = cookie
            return True

        def by_name(_t: object, name: bytes, ino: int, mode: int, cookie: int) -> bool:
            nonlocal last
            listed.append((name, ino, mode & 0o170000 == 0o040000))
            last = cookie
            return True

        pyfuse3.readdir_reply = full  # type: ignore[assignment]
        pyfuse3.readdir_reply_name = by_name  # type: ignore[assignment]
        ino = FileHandleT(self.dirs[rel])
        drive(self.fs.readdir(ino, 0, ReaddirToken()))
        # the request that finds the listing's end (the kernel's next after a full reply)
        drive(self.fs.readdir(ino, last, ReaddirToken()))
        self.replies += len(listed)
        return listed

    def readdir_all(self) -> None:
        todo = [b""]
        while todo:
            rel = todo.pop()
            for name, ino, is_dir in self.readdir(rel):
                if is_dir and name != b".git":
                    child = rel + b"/" + name if rel else name
                    self.dirs[child] = ino
                    todo.append(child)

    def forget_all(self) -> None:
        drive(self.fs.forget([(InodeT(i), c) for i, c in self.lookups.items()]))
        self.lookups.clear()
        self.dirs = {b"": ROOT_INODE}


def one_run(tree: Tree, rels: list[bytes], lookup_first: bool) -> tuple[float, float, int]:
    """CPU seconds of the lookups and listings, of the forgets, and the names served."""
    kernel = Kernel(fs.Filesystem(tree, ListAhead(tempfile.gettempdir() + "/nowhere")))
    start = time.thread_time()
    if lookup_first:
        for rel in rels:
            kernel.lookup_path(rel)
        for rel in sorted(kernel.dirs):
            kernel.readdir(rel)
    else:
        kernel.readdir_all()
    served = time.thread_time()
    kernel.forget_all()
    end = time.thread_time()
    assert len(tree.nodes) == 1, len(tree.nodes)
    return served - start, end - served, kernel.replies


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dirs", type=int, default=400)
    ap.add_argument("--per-dir", type=int, default=12)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--profile", help="write cProfile stats of the runs here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rels = make_worktree(Path(tmp) / "wt", args.dirs, args.per_dir)
        os.mkdir(Path(tmp) / "session")
        store = DeltaStore(str(Path(tmp) / "session" / "delta.db"))
        tree = Tree(store, str(Path(tmp) / "wt"), set())
        tree.catch_up()
        names = len(rels) + args.dirs + args.dirs // 20
        say(f"{len(rels):,} files, {names:,} names; load {os.getloadavg()[0]:.2f}")
        profiler = cProfile.Profile() if args.profile else None
        for lookup_first in (True, False):
            label = "lookup-first " if lookup_first else "readdir-first"
            run = functools.partial(one_run, tree, rels, lookup_first)
            run()
            if profiler is not None:
                profiler.enable()
            times = [run() for _ in range(args.runs)]
            if profiler is not None:
                profiler.disable()
            served = [t[0] / names * 1e6 for t in times]
            forgot = [t[1] / names * 1e6 for t in times]
            say(
                f"{label}: {statistics.median(served):5.2f} us/name served "
                f"(min {min(served):.2f}, max {max(served):.2f}), "
                f"{statistics.median(forgot):4.2f} us/name forgotten; "
                f"{times[0][2]:,} replies in listings"
            )
        if profiler is not None:
            profiler.dump_stats(args.profile)
        tree.close()
        store.close()


if __name__ == "__main__":
    main()
