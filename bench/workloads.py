"""The filesystem workloads (find, stat, read, write, create, rm -rf, and the --extra ones): each
prepares its steps on a view."""

from __future__ import annotations

import mmap
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.config import MIB, NATIVE, OVERLAYFS, Config, Step
from bench.corpus import Corpus
from bench.views import View

# ---------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Env:
    view: View
    corpus: Corpus
    cfg: Config


@dataclass(frozen=True)
class Prepared:
    action: Step  # the timed part
    cleanup: Step = lambda: None


@dataclass(frozen=True)
class Goal:
    """A target from issue 8: gitsess within `factor` times `against`."""

    against: str
    factor: float

    def __str__(self) -> str:
        return f"<= {self.factor:g}x {self.against}"


@dataclass(frozen=True)
class Workload:
    key: str
    label: str
    prepare: Callable[[Env], Prepared]
    cold: bool = False
    mutates: bool = False  # each run gets a fresh view (overlays) and cleans up (native)
    slow: bool = False  # seconds per run: `slow_runs` runs
    quick: bool = False  # part of --quick
    extra: bool = False  # only with --extra (or --only)
    goals: tuple[Goal, ...] = ()


def _abs(env: Env, rels: Sequence[str]) -> list[str]:
    root = str(env.view.root)
    return [f"{root}/{r}" for r in rels]


def _run(cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def prep_find(env: Env) -> Prepared:
    return Prepared(lambda: _run(["find", str(env.view.root)]))


def prep_lstat(env: Env) -> Prepared:
    paths = _abs(env, env.corpus.paths)

    def action() -> None:
        for p in paths:
            os.lstat(p)

    return Prepared(action)


def prep_read_small(env: Env) -> Prepared:
    paths = _abs(env, env.corpus.walk_files)

    def action() -> None:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                while os.read(fd, 65536):
                    pass
            finally:
                os.close(fd)

    return Prepared(action)


def prep_seq_read(env: Env) -> Prepared:
    (path,) = _abs(env, [env.corpus.big])

    def action() -> None:
        # Page-aligned, as `dd` and `cat` read: on some CPUs copying into a buffer 16 bytes off
        # a page (where a bytearray may start) is several times slower, which swamped the rows.
        with mmap.mmap(-1, MIB) as buf, open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass

    return Prepared(action)


def prep_seq_write(env: Env) -> Prepared:
    path = env.view.root / "bench-write.bin"
    block = bytearray(random.Random(1).randbytes(MIB))
    mib = env.cfg.write_mib

    def action() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for i in range(mib):
                block[:8] = i.to_bytes(8, "little")  # no two blocks alike, none all zeros
                os.write(fd, block)
            os.fsync(fd)
        finally:
            os.close(fd)

    return Prepared(action, lambda: path.unlink(missing_ok=True))


def prep_create(env: Env) -> Prepared:
    top = env.view.root / "bench-created"
    count = env.cfg.create_files
    body = b"x = 1\n" * 170  # ~1 KiB

    def action() -> None:
        top.mkdir()
        for d in range(count // 100):
            sub = top / f"d{d:02d}"
            sub.mkdir()
            for i in range(100):
                fd = os.open(sub / f"f{i:03d}.py", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, body)
                os.close(fd)

    return Prepared(action, lambda: shutil.rmtree(top, ignore_errors=True))


def _bulk_dir(env: Env) -> tuple[Path, Step]:
    """The lower directory of `bulk_files` files as a workload that changes it meets it: in an
    overlay (a view of its own per run) the lower directory itself; natively a fresh copy of it,
    as the corpus must survive, removed afterwards."""
    source = env.view.root / env.corpus.bulk
    if env.view.target != NATIVE:
        return source, lambda: None
    copy = env.view.root / "bench-bulk-copy"
    _run(["cp", "-a", str(source), str(copy)])
    _run(["sync"])
    return copy, lambda: shutil.rmtree(copy, ignore_errors=True)


def prep_rm_rf(env: Env) -> Prepared:
    victim, cleanup = _bulk_dir(env)
    _run(["find", str(victim)])  # every target starts with the tree in the caches
    return Prepared(lambda: _run(["rm", "-rf", str(victim)]), cleanup)


def prep_untar(env: Env) -> Prepared:
    tarball = env.corpus.repo.parent / "bulk.tar"
    if not tarball.exists():
        _run(["tar", "-cf", str(tarball), "-C", str(env.corpus.repo), env.corpus.bulk])
    dest = env.view.root / "bench-untar"

    def action() -> None:
        dest.mkdir()
        _run(["tar", "-xf", str(tarball), "-C", str(dest)])

    return Prepared(action, lambda: shutil.rmtree(dest, ignore_errors=True))


def prep_cp_a(env: Env) -> Prepared:
    source, dest = env.view.root / env.corpus.bulk, env.view.root / "bench-cp"
    return Prepared(
        lambda: _run(["cp", "-a", str(source), str(dest)]),
        lambda: shutil.rmtree(dest, ignore_errors=True),
    )


def prep_mv_dir(env: Env) -> Prepared:
    victim, _ = _bulk_dir(env)
    moved = env.view.root / "bench-moved"

    def cleanup() -> None:
        if env.view.target == NATIVE:  # an overlay's view goes as a whole
            shutil.rmtree(moved, ignore_errors=True)

    return Prepared(lambda: _run(["mv", str(victim), str(moved)]), cleanup)


def prep_chmod_r(env: Env) -> Prepared:
    victim, cleanup = _bulk_dir(env)
    return Prepared(lambda: _run(["chmod", "-R", "g+w", str(victim)]), cleanup)


def prep_sed_i(env: Env) -> Prepared:
    victim, cleanup = _bulk_dir(env)
    # sed -i writes each file aside and renames it over the original, as many editors do.
    edit = ["find", str(victim), "-type", "f", "-exec", "sed", "-i", "s/1/2/", "{}", "+"]
    return Prepared(lambda: _run(edit), cleanup)


def prep_venv(env: Env) -> Prepared:
    dest = env.view.root / "bench-venv"
    # ensurepip installs pip from the wheel CPython ships: a package install (some 1,600 files
    # unpacked and byte-compiled, a RECORD written) that needs no network.
    return Prepared(
        lambda: _run([sys.executable, "-m", "venv", str(dest)]),
        lambda: shutil.rmtree(dest, ignore_errors=True),
    )


def prep_git_status(env: Env) -> Prepared:
    return Prepared(lambda: _run(["git", "status", "--porcelain"], cwd=env.view.root))


def workloads() -> list[Workload]:
    ovl = Goal(OVERLAYFS, 1.0)
    return [
        Workload("find-cold", "find (cold)", prep_find, cold=True, goals=(ovl,)),
        Workload("find-warm", "find (warm)", prep_find, quick=True, goals=(ovl,)),
        Workload("lstat-cold", "lstat every file (cold)", prep_lstat, cold=True, goals=(ovl,)),
        Workload(
            "lstat-warm",
            "lstat every file (warm)",
            prep_lstat,
            quick=True,
            goals=(Goal(NATIVE, 2.0), ovl),
        ),
        Workload(
            "read-small-cold",
            "read every small file (cold)",
            prep_read_small,
            cold=True,
            goals=(ovl,),
        ),
        Workload(
            "read-small-warm",
            "read every small file (warm)",
            prep_read_small,
            quick=True,
            goals=(ovl,),
        ),
        Workload(
            "seq-read-cold",
            "sequential read, big file (cold)",
            prep_seq_read,
            cold=True,
            goals=(ovl,),
        ),
        Workload(
            "seq-read-warm",
            "sequential read, big file (warm)",
            prep_seq_read,
            quick=True,
            goals=(Goal(NATIVE, 1.3), ovl),
        ),
        Workload(
            "seq-write",
            "sequential write + fsync",
            prep_seq_write,
            mutates=True,
            quick=True,
            goals=(Goal(NATIVE, 2.0), ovl),
        ),
        Workload(
            "create",
            "create 2,000 small files",
            prep_create,
            mutates=True,
            slow=True,
            quick=True,
            goals=(ovl,),
        ),
        Workload(
            "rm-rf",
            "rm -rf lower dir (2,000 files)",
            prep_rm_rf,
            mutates=True,
            slow=True,
            goals=(Goal(NATIVE, 3.0), ovl),
        ),
        Workload("git-status-cold", "git status (cold)", prep_git_status, cold=True, goals=(ovl,)),
        Workload(
            "git-status-warm",
            "git status (warm)",
            prep_git_status,
            quick=True,
            goals=(Goal(NATIVE, 2.0), ovl),
        ),
        *(
            Workload(key, label, prep, mutates=True, slow=True, extra=True, goals=(ovl,))
            for key, label, prep in (
                ("untar", "tar -x of the lower directory's 2,000 files", prep_untar),
                ("cp-a", "cp -a of a lower directory (2,000 files)", prep_cp_a),
                ("mv-dir", "mv of a lower directory (2,000 files)", prep_mv_dir),
                ("chmod-r", "chmod -R of a lower directory (2,000 files)", prep_chmod_r),
                ("sed-i", "sed -i of 2,000 lower files", prep_sed_i),
                ("venv", "python -m venv (pip installed by ensurepip)", prep_venv),
            )
        ),
    ]
