#!/usr/bin/env python3
"""Benchmark a gitsess session mount against a native directory and fuse-overlayfs.

Builds a corpus in a temporary directory (a git repository of about 5,000 small files in 400
directories, ~50 MB, plus one 500 MB file git ignores), then measures the same workloads on
three views of that one tree, in one run: the directory itself (native), fuse-overlayfs over it,
and a gitsess session mount over it. Every figure is the median of several runs; cold runs drop
the page cache first (root only). Also measured: session creation + first mount (`gitsess new`
then `gitsess mount`, and the one command `gitsess new --mount`) against `git worktree add` on a
5,000- and a 50,000-file repository, `gitsess diff` / `apply --commit` of 1,000 changed files
(once the CLI has them), the FUSE daemons' CPU time per run and their peak memory (VmHWM).
With --extra, also what tools do to a lower directory of 2,000 files: unpack it from a
tarball, `cp -a`, `mv`, `chmod -R`, and `sed -i` of every file (a write aside and a rename
over each); and a package install, `python -m venv` (ensurepip installs pip, offline).

    sudo .venv/bin/python scripts/bench.py                  # the full run (10-20 minutes)
    sudo .venv/bin/python scripts/bench.py --extra          # also the --extra workloads
    .venv/bin/python scripts/bench.py --quick               # a subset, under a minute
    .venv/bin/python scripts/bench.py --json out.json       # also write the results as JSON
    .venv/bin/python scripts/bench.py --markdown out.md     # also write the tables as Markdown
    .venv/bin/python scripts/bench.py --profile prof/ --only read-small-warm
        # also run the gitsess daemon under cProfile for one extra run of each workload

The goal column also gives, for each goal, in how many runs gitsess was within it of the target
measured right beside it in the same run, and calls the row a tie when a sign test cannot tell
that from a coin toss: such a row's median lands either side of the goal from run to run.

Ratios vary with the machine and its load: read them, never assert them in tests.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import json
import math
import mmap
import os
import platform
import pstats
import random
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

import gitsess
from gitsess.git.repo import discover
from gitsess.overlay import mounttable
from gitsess.runtime import mount, prestart, spare

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)

NATIVE = "native"
OVERLAYFS = "fuse-overlayfs"
GITSESS = "gitsess"
TARGETS = (NATIVE, OVERLAYFS, GITSESS)
MIB = 1024 * 1024
GITSESS_CLI = str(Path(sys.executable).parent / "gitsess")

Step = Callable[[], None]


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Config:
    quick: bool
    runs: int  # per figure
    slow_runs: int  # for the workloads that take seconds per run
    big_mib: int  # the file outside git
    write_mib: int  # sequential write + fsync
    creation_runs: int
    apply_runs: int  # diff / apply --commit, which swing most from run to run
    small_files: int = 5000
    dirs: int = 400
    corpus_mib: int = 50
    create_files: int = 2000
    bulk_files: int = 2000  # the lower directory `rm -rf` removes
    wide_files: int = 50_000  # the second repository for session creation
    fleet_sessions: int = 50  # sessions mounted at once for their memory
    changed_files: int = 1000  # diff / apply --commit
    extra: bool = False  # also the workloads beyond issue 8's list

    @staticmethod
    def make(quick: bool, runs: int | None, extra: bool = False) -> Config:
        if quick:
            return Config(
                True, runs or 3, runs or 1, big_mib=64, write_mib=64, creation_runs=1,
                apply_runs=1, extra=extra,
            )  # fmt: skip
        return Config(
            False, runs or 9, runs or 5, big_mib=500, write_mib=500, creation_runs=3,
            apply_runs=runs or 5, extra=extra,
        )  # fmt: skip


# ---------------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Corpus:
    repo: Path
    files: list[str]  # every regular file git tracks, relative
    dirs: list[str]  # every directory outside .git, relative
    big: str  # the large file git ignores, relative
    bulk: str  # a directory holding `bulk_files` files, relative

    @functools.cached_property
    def paths(self) -> list[str]:
        """Every path, in the order a walk of the tree gives them (as `git status`, `find`,
        `ls -R` and `os.walk` go, directory by directory). `files` is in the order they were
        made, one directory after another round the tree, and in that order the kernel's
        objects for a view whose daemon answered one LOOKUP at a time lie in memory in the
        order they are asked for: warm `lstat` in it was 5-6 % quicker on fuse-overlayfs than
        on gitsess, which lists directories ahead, and at parity in walk order (PERFORMANCE.md,
        2 December)."""
        return sorted([*self.dirs, *self.files, self.big])

    @functools.cached_property
    def walk_files(self) -> list[str]:
        return sorted(self.files)


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}")
    return done.stdout


def _text_pool(rng: random.Random) -> bytes:
    """64 KiB of source-like text that file bodies are cut from."""
    words = [
        "def", "return", "self", "import", "class", "value", "for", "in", "if", "else",
        "None", "True", "items", "result", "data", "config", "path", "name", "index", "=",
    ]  # fmt: skip
    lines: list[str] = []
    size = 0
    while size < 64 * 1024:
        lines.append("    " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
        size += len(lines[-1]) + 1
    return ("\n".join(lines) + "\n").encode()


def _write_files(root: Path, rels: Sequence[str], total_bytes: int, rng: random.Random) -> None:
    pool = _text_pool(rng)
    mean = max(64, total_bytes // max(1, len(rels)))
    for i, rel in enumerate(rels):
        size = rng.randint(mean // 10, 2 * mean - mean // 10)
        start = rng.randrange(0, len(pool) - 1)
        body = (pool[start:] + pool)[:size]
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"# {rel} {i}\n".encode() + body)


def _layout(files: int, dirs: int, bulk_files: int) -> list[str]:
    """Relative file paths: `src/` spread over most directories, `vendor/` holding the bulk."""
    bulk_dirs = max(1, dirs * bulk_files // max(1, files) // 2)
    src_dirs = max(1, dirs - bulk_dirs - 20)
    rels: list[str] = []
    for i in range(bulk_files):
        d = i % bulk_dirs
        rels.append(f"vendor/lib{d // 16:02d}/pkg{d:03d}/mod{i:05d}.py")
    for i in range(files - bulk_files):
        d = i % src_dirs
        rels.append(f"src/pkg{d // 16:02d}/mod{d:03d}/file{i:05d}.py")
    return rels


def _init_repo(repo: Path, env: dict[str, str]) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main", env=env)


def _commit_all(repo: Path, rels: Sequence[str], env: dict[str, str]) -> None:
    """Commit the files `rels` (already on disk) as one pack, the way a clone has them, and
    fill the index: `git fast-import` is much quicker than `git add` + `git gc`."""
    stream = bytearray()
    for i, rel in enumerate(rels, start=1):
        data = (repo / rel).read_bytes()
        stream += b"blob\nmark :%d\ndata %d\n%s\n" % (i, len(data), data)
    stream += b"commit refs/heads/main\ncommitter Bench <bench@example.com> 1700000000 +0000\n"
    stream += b"data 7\ncorpus\n"
    for i, rel in enumerate(rels, start=1):
        stream += b"M 100644 :%d %s\n" % (i, rel.encode())
    subprocess.run(
        ["git", "-c", "pack.compression=1", "fast-import", "--quiet"],
        cwd=repo,
        env=env,
        input=bytes(stream),
        check=True,
    )
    git(repo, "reset", "-q", env=env)
    git(repo, "update-index", "-q", "--refresh", env=env)


def build_corpus(repo: Path, cfg: Config, env: dict[str, str]) -> Corpus:
    rng = random.Random(8)
    _init_repo(repo, env)
    rels = _layout(cfg.small_files, cfg.dirs, cfg.bulk_files)
    _write_files(repo, rels, cfg.corpus_mib * MIB, rng)
    (repo / ".gitignore").write_text("/data/\n")
    _commit_all(repo, [*rels, ".gitignore"], env)
    big = "data/big.bin"
    _write_big(repo / big, cfg.big_mib, rng)
    dirs = sorted({str(p) for r in rels for p in Path(r).parents} - {"."})
    subprocess.run(["sync"], check=True)
    return Corpus(repo, [*rels, ".gitignore"], [*dirs, "data"], big, "vendor")


def _write_big(path: Path, mib: int, rng: random.Random) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytearray(rng.randbytes(MIB))
    with open(path, "wb") as f:
        for i in range(mib):
            block[:8] = i.to_bytes(8, "little")
            f.write(block)


def build_wide_repo(repo: Path, files: int, env: dict[str, str]) -> list[str]:
    """A repository of `files` small (~1 KiB) files, about 12 per directory."""
    rng = random.Random(50)
    _init_repo(repo, env)
    per_dir = 12
    rels = [f"d{i // per_dir // 64:03d}/s{i // per_dir:05d}/f{i:06d}.txt" for i in range(files)]
    _write_files(repo, rels, files * 1024, rng)
    _commit_all(repo, rels, env)
    return rels


def isolated_env(home: Path) -> dict[str, str]:
    """An environment where git and gitsess read and write nothing of the real user's."""
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CONFIG_HOME=str(home / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Bench",
        GIT_AUTHOR_EMAIL="bench@example.com",
        GIT_COMMITTER_NAME="Bench",
        GIT_COMMITTER_EMAIL="bench@example.com",
        # No `git gc --auto` in the background (the commits of the apply workload add 1,000
        # loose objects each): it would run through later measurements and hold views busy.
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="gc.auto",
        GIT_CONFIG_VALUE_0="0",
    )
    for key in ("GITSESS_SESSION", "GITSESS_DIR", "GIT_DIR", "GIT_WORK_TREE"):
        env.pop(key, None)
    home.mkdir(parents=True, exist_ok=True)
    return env


# ---------------------------------------------------------------------------------- views


@dataclass(frozen=True)
class View:
    """One target's view of a tree: where to work, and which process serves it."""

    target: str
    root: Path
    pid: int | None = None  # the FUSE daemon, None for the native directory
    upper: Path | None = None  # fuse-overlayfs: where its changes are

    def peak_kib(self) -> int | None:
        return peak_memory_kib(self.pid) if self.pid is not None else None

    def cpu_seconds(self) -> float | None:
        return daemon_cpu_seconds(self.pid) if self.pid is not None else None


def peak_memory_kib(pid: int) -> int | None:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def daemon_cpu_seconds(pid: int) -> float | None:
    """User and system time of every thread of process `pid` so far (listing threads that
    ended are counted in the process's own figures too)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
        utime, stime = fields[11:13]  # fields 14 and 15 of proc(5), after pid and comm
        return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")
    return None


def _kill_if(pid: int, *markers: str) -> None:
    """SIGKILL `pid` if it still is the process we started (its command line has a marker)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return
    if any(marker.encode() in cmdline for marker in markers):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _force_unmount(path: Path) -> None:
    if mounttable.is_mount_point(path):
        subprocess.run(["fusermount3", "-uz", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def native_view(lower: Path) -> Iterator[View]:
    yield View(NATIVE, lower)


@contextlib.contextmanager
def overlayfs_view(lower: Path, scratch: Path) -> Iterator[View]:
    base = Path(tempfile.mkdtemp(prefix="ovl-", dir=scratch))
    upper, work, mnt = base / "upper", base / "work", base / "mnt"
    for d in (upper, work, mnt):
        d.mkdir()
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    proc = subprocess.Popen(
        ["fuse-overlayfs", "-f", "-o", opts, str(mnt)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not mounttable.is_mount_point(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fuse-overlayfs did not mount {mnt}")
            time.sleep(0.01)
        yield View(OVERLAYFS, mnt, proc.pid, upper)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False, capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _force_unmount(mnt)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def gitsess_view(lower: Path, scratch: Path, profile: Path | None = None) -> Iterator[View]:
    """A fresh session over `lower`; with `profile`, its daemon runs under cProfile and leaves
    its stats there when it stops."""
    session_dir = Path(tempfile.mkdtemp(prefix="sess-", dir=scratch))
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()), lower=lower, session_dir=session_dir, persistent=True
    )
    with gitsess_mounted(spec, profile) as pid:
        yield View(GITSESS, spec.target, pid)
    shutil.rmtree(session_dir, ignore_errors=True)


@contextlib.contextmanager
def gitsess_mounted(spec: mount.MountSpec, profile: Path | None = None) -> Iterator[int]:
    """Mount a session view; always stop it, and never leave its daemon or mount behind."""
    pid: int | None = None
    try:
        if profile is None:
            pid = mount.ensure_mounted(spec).daemon_pid
        else:
            pid = _start_profiled_daemon(spec, profile)
        yield pid
    finally:
        ensure_stopped(spec, pid)


def ensure_stopped(spec: mount.MountSpec, pid: int | None) -> None:
    """Stop the session's daemon if it still runs, then make sure of it: kill the daemon we
    know of and lazily unmount whatever is left."""
    try:
        mount.stop(spec.session_dir, spec.target)
    finally:
        if pid is not None and not _exited(pid, timeout=30):
            # `gitsess mount` has the spare fork its daemon, which then shows as the spare
            _kill_if(pid, prestart.DAEMON_MODULE, spare.MODULE)
        _force_unmount(spec.target)


def _exited(pid: int, timeout: float) -> bool:
    """Wait until `pid` is gone or a zombie (a daemon under cProfile still writes its stats
    after it has unmounted)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def _start_profiled_daemon(spec: mount.MountSpec, profile: Path) -> int:
    """What `mount.ensure_mounted` does, with the daemon under `python -m cProfile`."""
    spec.target.mkdir(mode=0o700, parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    cmd = [
        sys.executable, "-m", "cProfile", "-o", str(profile), "-m", prestart.DAEMON_MODULE,
        "--session-id", spec.session_id, "--lower", str(spec.lower), "--delta", str(spec.delta),
        "--mountpoint", str(spec.target), "--persistent", "--ready-fd", str(write_end),
    ]  # fmt: skip
    with open(spec.log, "ab") as log:
        subprocess.Popen(cmd, stdout=log, stderr=log, pass_fds=(write_end,), start_new_session=True)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        answer = ready.readline().strip()
    live = mount.status(spec.session_dir)
    if answer != b"ready" or live is None:
        raise RuntimeError(f"the profiled daemon did not start: {answer!r}, see {spec.log}")
    return live.daemon_pid


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


# ---------------------------------------------------------------------------------- results


@dataclass
class Result:
    key: str
    label: str
    goals: list[Goal] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)  # the daemons', per run

    def add(self, target: str, seconds: float, cpu: float | None = None) -> None:
        self.times.setdefault(target, []).append(seconds)
        if cpu is not None:
            self.cpu.setdefault(target, []).append(cpu)

    def cpu_median(self, target: str) -> float | None:
        return _median(self.cpu.get(target))

    def median(self, target: str) -> float | None:
        return _median(self.times.get(target))

    def ratio(self, target: str, against: str) -> float | None:
        a, b = self.median(target), self.median(against)
        return a / b if a is not None and b else None

    def goal_met(self) -> bool | None:
        ratios = [(self.ratio(GITSESS, g.against), g.factor) for g in self.goals]
        if not ratios or any(r is None for r, _ in ratios):
            return None
        return all(r is not None and r <= factor for r, factor in ratios)

    def runs_within(self, goal: Goal) -> tuple[int, int]:
        """In how many runs gitsess was within the goal of the target measured right beside it
        (the same run of the rotation), and of how many runs."""
        pairs = list(
            zip(self.times.get(GITSESS, []), self.times.get(goal.against, []), strict=True)
        )
        return sum(g <= goal.factor * a for g, a in pairs), len(pairs)

    def decided(self, goal: Goal) -> bool:
        """Whether the runs tell the two sides of the goal apart (a sign test, 5 % for each
        side, so that 5 of 5 runs decide): a row where gitsess is within the goal in about half
        the runs is a tie, and its median falls either side of the goal from run to run."""
        k, n = self.runs_within(goal)
        return n > 0 and sign_test(k, n) < 0.1


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def sign_test(k: int, n: int) -> float:
    """The two-sided p-value of `k` successes in `n` runs, if each run were a coin toss."""
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / (1 << n)
    return min(1.0, 2 * tail)


@dataclass
class Memory:
    """Peak resident memory (VmHWM, KiB) of the FUSE daemons, by what they went through."""

    peaks: dict[str, dict[str, int]] = field(default_factory=dict)

    def record(self, where: str, view: View) -> None:
        kib = view.peak_kib()
        if kib is not None:
            slot = self.peaks.setdefault(where, {})
            slot[view.target] = max(kib, slot.get(view.target, 0))


# ---------------------------------------------------------------------------------- measuring


@dataclass
class Bench:
    """Everything one benchmark run shares."""

    cfg: Config
    tmp: Path
    env: dict[str, str]  # for git and gitsess subprocesses
    profile_dir: Path | None = None
    memory: Memory = field(default_factory=Memory)
    notes: list[str] = field(default_factory=list)

    @property
    def scratch(self) -> Path:
        path = self.tmp / "scratch"
        path.mkdir(exist_ok=True)
        return path

    def view(
        self, target: str, lower: Path, profile: str | None = None
    ) -> contextlib.AbstractContextManager[View]:
        if target == NATIVE:
            return native_view(lower)
        if target == OVERLAYFS:
            return overlayfs_view(lower, self.scratch)
        stats = None if profile is None or self.profile_dir is None else self.stats_path(profile)
        return gitsess_view(lower, self.scratch, stats)

    def stats_path(self, key: str) -> Path:
        assert self.profile_dir is not None
        return self.profile_dir / f"{key}.prof"


def can_drop_caches() -> bool:
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    # The kernel now sends FORGETs to every FUSE daemon; let them drain before timing.
    time.sleep(0.3)


def timed(step: Step) -> float:
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def measure_once(w: Workload, env: Env) -> tuple[float, float | None]:
    """The wall time of one run of `w`, and the CPU time its daemon spent meanwhile."""
    prepared = w.prepare(env)
    try:
        if w.cold:
            drop_caches()
        before = env.view.cpu_seconds()
        seconds = timed(prepared.action)
        after = env.view.cpu_seconds()
        cpu = after - before if after is not None and before is not None else None
        return seconds, cpu
    finally:
        prepared.cleanup()


def rotation(run: int) -> list[str]:
    """The order of the targets in run `run`: each goes first in turn, so drift spreads out."""
    k = run % len(TARGETS)
    return [*TARGETS[k:], *TARGETS[:k]]


def run_shared(b: Bench, items: Sequence[Workload], corpus: Corpus) -> list[Result]:
    """Workloads that leave the tree as they found it: one view per target for all runs."""
    results: list[Result] = []
    if not items:
        return results
    with contextlib.ExitStack() as stack:
        views = {t: stack.enter_context(b.view(t, corpus.repo)) for t in TARGETS}
        for w in items:
            res = Result(w.key, w.label, list(w.goals))
            envs = {t: Env(views[t], corpus, b.cfg) for t in TARGETS}
            if not w.cold:
                for t in TARGETS:
                    measure_once(w, envs[t])  # warm-up, not counted
            for run in range(b.cfg.runs):
                for t in rotation(run):
                    res.add(t, *measure_once(w, envs[t]))
            progress(res)
            results.append(res)
        for view in views.values():
            b.memory.record("5,000-file corpus: read workloads", view)
    return results


def run_mutating(b: Bench, items: Sequence[Workload], corpus: Corpus) -> list[Result]:
    """Workloads that change the tree: a fresh view for every run, one view at a time."""
    results = []
    for w in items:
        res = Result(w.key, w.label, list(w.goals))
        for run in range(b.cfg.slow_runs if w.slow else b.cfg.runs):
            for t in rotation(run):
                with b.view(t, corpus.repo) as view:
                    res.add(t, *measure_once(w, Env(view, corpus, b.cfg)))
                    b.memory.record("5,000-file corpus: write workloads", view)
        progress(res)
        results.append(res)
    return results


def run_profiles(b: Bench, items: Sequence[Workload], corpus: Corpus) -> None:
    """One extra, uncounted run of each workload on a gitsess daemon under cProfile."""
    for w in items:
        with b.view(GITSESS, corpus.repo, profile=w.key) as view:
            env = Env(view, corpus, b.cfg)
            if not w.cold and not w.mutates:
                measure_once(w, env)  # the warm-up is profiled too
            took, _ = measure_once(w, env)
        console.log(f"profiled {w.label}: {fmt_time(took)} under cProfile")


def progress(res: Result) -> None:
    parts = [f"{t} {fmt_time(res.median(t))}" for t in TARGETS if res.median(t) is not None]
    console.log(f"{res.label}: " + ", ".join(parts))


# ---------------------------------------------------------------------------------- sessions


@dataclass(frozen=True)
class Session:
    name: str
    id: str
    worktree: Path


def gitsess_cli(b: Bench, repo: Path, *args: str) -> str:
    done = subprocess.run(
        [GITSESS_CLI, *args], cwd=repo, env=b.env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"gitsess {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def cli_has(b: Bench, *commands: str) -> bool:
    return all(
        subprocess.run(
            [GITSESS_CLI, c, "--help"], env=b.env, capture_output=True, check=False
        ).returncode
        == 0
        for c in commands
    )


def gitsess_new(b: Bench, repo: Path, name: str, *extra: str) -> Session:
    data = json.loads(gitsess_cli(b, repo, "new", name, "--json", *extra))
    return Session(name, str(data["id"]), Path(str(data["worktree"])))


def session_dir_of(session: Session) -> Path:
    """The session's dir, which names its daemon (its state lives under the git dir)."""
    return discover(session.worktree).session_dir(session.id)


def session_spec(repo: Path, session: Session) -> mount.MountSpec:
    """Where gitsess keeps and mounts the session (its state lives under the git dir)."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    return mount.MountSpec(
        session_id=session.id,
        lower=session.worktree,
        session_dir=common / "gitsess" / "sessions" / session.id,
    )


@contextlib.contextmanager
def cli_mounted(b: Bench, repo: Path, session: Session) -> Iterator[View]:
    """`gitsess mount` ... `gitsess umount`, never leaving the daemon or the mount behind."""
    spec = session_spec(repo, session)
    pid: int | None = None
    try:
        gitsess_cli(b, repo, "mount", session.name)
        live = mount.status(session_dir_of(session))
        pid = live.daemon_pid if live is not None else None
        yield View(GITSESS, spec.target, pid)
    finally:
        try:
            subprocess.run(
                [GITSESS_CLI, "umount", session.name], cwd=repo, env=b.env, capture_output=True
            )
        finally:
            ensure_stopped(spec, pid)


@contextlib.contextmanager
def new_session(b: Bench, repo: Path, name: str, *extra: str) -> Iterator[Session]:
    """A session made with `gitsess new`, removed (worktree and branch too) afterwards."""
    try:
        yield gitsess_new(b, repo, name, *extra)
    finally:
        subprocess.run(
            [GITSESS_CLI, "rm", name, "--force"], cwd=repo, env=b.env, capture_output=True
        )


@dataclass
class Creation:
    files: int
    new: list[float] = field(default_factory=list)
    mount: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    new_mount: list[float] = field(default_factory=list)  # `gitsess new --mount`, one command
    worktree_add: list[float] = field(default_factory=list)

    def medians(self) -> dict[str, float]:
        return {
            "gitsess_new": statistics.median(self.new),
            "gitsess_mount": statistics.median(self.mount),
            "gitsess_total": statistics.median(self.total),
            "gitsess_new_mount": statistics.median(self.new_mount),
            "git_worktree_add": statistics.median(self.worktree_add),
        }


def time_session_start(b: Bench, repo: Path, name: str, c: Creation) -> None:
    """`gitsess new` then `gitsess mount`, until the view lists its root."""
    t0 = time.perf_counter()
    with new_session(b, repo, name) as session:
        t1 = time.perf_counter()
        with cli_mounted(b, repo, session) as view:
            next(view.root.iterdir(), None)
            t2 = time.perf_counter()
            b.memory.record(f"{c.files:,}-file repo: session start", view)
    c.new.append(t1 - t0)
    c.mount.append(t2 - t1)
    c.total.append(t2 - t0)


def time_new_mount(b: Bench, repo: Path, name: str, c: Creation) -> None:
    """`gitsess new --mount`, until the view lists its root."""
    t0 = time.perf_counter()
    with new_session(b, repo, name, "--mount") as session:
        live = mount.status(session_dir_of(session))
        try:
            if live is None:
                raise RuntimeError(f"gitsess new {name} --mount left nothing mounted")
            next(Path(live.mountpoint).iterdir(), None)
            c.new_mount.append(time.perf_counter() - t0)
        finally:
            subprocess.run(
                [GITSESS_CLI, "umount", session.name], cwd=repo, env=b.env, capture_output=True
            )
            ensure_stopped(session_spec(repo, session), live.daemon_pid if live else None)


def time_worktree_add(b: Bench, repo: Path, path: Path, branch: str) -> float:
    t0 = time.perf_counter()
    try:
        git(repo, "worktree", "add", "-q", "-b", branch, str(path), env=b.env)
        return time.perf_counter() - t0
    finally:
        git(repo, "worktree", "remove", "--force", str(path), env=b.env)
        git(repo, "branch", "-q", "-D", branch, env=b.env)


def run_creation(b: Bench, repos: Sequence[tuple[Path, int]]) -> list[Creation]:
    results = []
    for repo, files in repos:
        c = Creation(files)
        for i in range(b.cfg.creation_runs):
            time_session_start(b, repo, f"bench-{i}", c)
            time_new_mount(b, repo, f"bench-one-{i}", c)
            wt = b.scratch / f"wt-{repo.name}-{i}"
            c.worktree_add.append(time_worktree_add(b, repo, wt, f"bench-wt-{i}"))
        m = c.medians()
        console.log(
            f"start on {files:,} files: gitsess new {fmt_time(m['gitsess_new'])} + mount "
            f"{fmt_time(m['gitsess_mount'])}, new --mount {fmt_time(m['gitsess_new_mount'])}, "
            f"git worktree add {fmt_time(m['git_worktree_add'])}"
        )
        results.append(c)
    return results


# ---------------------------------------------------------------------- cli start

CLI_START_GOAL = 0.080  # seconds, whole process, median (issue 40)
CLI_COMMANDS = (("ls",), ("show", "bench-cli"), ("kv", "bench-cli", "get", "k"), ("--version",))


@dataclass
class CliStart:
    """Whole-process wall times of the small commands, beside `git status` and `python -c
    pass` measured in the same rotation."""

    times: dict[str, list[float]] = field(default_factory=dict)

    def add(self, label: str, seconds: float) -> None:
        self.times.setdefault(label, []).append(seconds)

    def median(self, label: str) -> float:
        return statistics.median(self.times[label])


def run_cli_start(b: Bench, repo: Path) -> CliStart:
    gitsess_cli(b, repo, "new", "bench-cli")
    gitsess_cli(b, repo, "kv", "bench-cli", "set", "k", "v")
    commands = {f"gitsess {' '.join(c)}": [GITSESS_CLI, *c] for c in CLI_COMMANDS}
    commands["git status"] = ["git", "status"]
    commands["python -c pass"] = [sys.executable, "-c", "pass"]
    # As installed: with the bytecode cached (PYTHONDONTWRITEBYTECODE would have each run
    # compile every module again, doubling what is measured), written by one untimed round.
    env = {k: v for k, v in b.env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = CliStart()
    labels = list(commands)
    try:
        for label in labels:
            _run(commands[label], repo, env)
        # Short commands swing most with the machine's load: twice the runs of a workload.
        for run in range(b.cfg.runs * 2 + 1):
            k = run % len(labels)
            for label in [*labels[k:], *labels[:k]]:
                result.add(label, timed(functools.partial(_run, commands[label], repo, env)))
    finally:
        gitsess_cli(b, repo, "rm", "bench-cli", "--force")
    console.log(
        "cli start: " + ", ".join(f"{label} {fmt_time(result.median(label))}" for label in labels)
    )
    return result


def cli_start_rows(c: CliStart) -> list[list[str]]:
    git_status, python = c.median("git status"), c.median("python -c pass")
    return [
        [
            label,
            fmt_time(c.median(label)),
            fmt_time(git_status),
            fmt_time(python),
            fmt_ratio(c.median(label) / git_status),
            _colour("yes" if c.median(label) < CLI_START_GOAL else "no"),
        ]
        for label in c.times
        if label.startswith("gitsess")
    ]


CLI_START_HEADER = [
    "command", "gitsess", "git status", "python -c pass", "/ git status", "< 80 ms"
]  # fmt: skip


def run_wide_memory(b: Bench, repo: Path, rels: Sequence[str]) -> None:
    """Peak memory of both daemons after find, reading every file and git status of a big
    repository through them."""
    for target in (OVERLAYFS, GITSESS):
        with b.view(target, repo) as view:
            _run(["find", str(view.root)])
            for rel in rels:
                with open(view.root / rel, "rb") as f:
                    f.read()
            _run(["git", "status", "--porcelain"], cwd=view.root)
            b.memory.record(f"{len(rels):,}-file repo: find, read all, git status", view)


# ---------------------------------------------------------------------------------- checkpoints


def _disk_bytes(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if not p.is_symlink())


def _checkpoint(session_dir: str) -> None:
    from gitsess.overlay import protocol

    protocol.checkpoint(session_dir, "manual", "", None, None)


def _rewind(session_dir: str, cp: int) -> None:
    from gitsess.overlay import protocol

    protocol.rewind(session_dir, cp, "rewind")


def run_checkpoints(b: Bench) -> None:
    """Checkpoints (overlay/history.py), gitsess alone (nothing to compare them with): the
    time of a checkpoint over a 50,000-file worktree with 1,000 paths changed since the last
    one, of a live rewind of 1,000 paths, and the storage 100 checkpoints of 20 files of 10 KB
    edited each turn take."""
    from gitsess.overlay import protocol

    wide = b.tmp / "cp-wide"
    console.log(f"checkpoints: building the {b.cfg.wide_files:,}-file repository")
    rels = build_wide_repo(wide, b.cfg.wide_files, b.env)
    changed = rels[:: max(1, len(rels) // 1000)][:1000]
    with new_session(b, wide, "cp") as s, cli_mounted(b, wide, s) as view:
        times = []
        sd = str(session_dir_of(s))
        for run in range(b.cfg.runs):
            _change_files(view.root, changed, f"cp{run}")
            protocol.sync(sd)
            times.append(timed(functools.partial(_checkpoint, sd)))
        cp = protocol.checkpoint(sd, "manual", "", None, None)
        assert cp is not None
        _change_files(view.root, changed, "rewind")
        protocol.sync(sd)
        rewind = timed(functools.partial(_rewind, sd, cp))
    b.notes.append(
        f"checkpoint, {len(rels):,}-file worktree, {len(changed):,} paths changed since the"
        f" last: median {fmt_time(statistics.median(times))} of {len(times)} (daemon op,"
        f" after a sync); live rewind of {len(changed):,} paths: {fmt_time(rewind)}"
    )
    small = b.tmp / "cp-turns"
    _init_repo(small, b.env)
    names = [f"f{i:02d}.txt" for i in range(20)]
    rng = random.Random(20)
    _write_files(small, names, 20 * 10_000, rng)
    _commit_all(small, names, b.env)
    turns, edited = 100, 0
    with new_session(b, small, "turns") as s:
        with cli_mounted(b, small, s) as view:
            for _ in range(turns):
                for name in names:
                    (view.root / name).write_bytes(rng.randbytes(10_000))
                    edited += 10_000
                protocol.checkpoint(str(session_dir_of(s)), "turn", "", None, None)
        # unmounted: its last commit and WAL checkpoint are done
        session_dir = session_spec(small, s).session_dir
        total = sum(
            _disk_bytes(session_dir / name)
            if (session_dir / name).is_dir()
            else (session_dir / name).stat().st_blocks * 512
            for name in ("delta.db", "delta.db-wal", "data", "checkpoints")
            if (session_dir / name).exists()
        )
    live = 20 * 10_000
    b.notes.append(
        f"storage after {turns} checkpoints of 20 files x 10 KB edited each turn:"
        f" {total / MIB:.1f} MiB on disk (delta.db, data, checkpoints) for a live view of"
        f" {live / 1000:.0f} KB and {edited / MIB:.1f} MiB of edits:"
        f" {total / (live + edited):.2f}x (goal < 2x)"
    )


STRESS_OPS = 100_000


def _stress(root: Path, ops: int, seed: int) -> None:
    """Many small writes, renames and unlinks over about 100 files (a view of ~220 KB), as
    an agent's build-and-test loop makes them: the audit log grows by one row per change."""
    rng = random.Random(seed)
    names = [f"s{i:03d}" for i in range(100)]
    for _ in range(ops):
        name = root / rng.choice(names)
        roll = rng.random()
        if roll < 0.7 or not name.exists():
            name.write_bytes(rng.randbytes(rng.randint(500, 4000)))
        elif roll < 0.85:
            name.rename(root / rng.choice(names))
        else:
            name.unlink()


def _session_disk(session_dir: Path) -> int:
    return sum(
        _disk_bytes(session_dir / name)
        if (session_dir / name).is_dir()
        else (session_dir / name).stat().st_blocks * 512
        for name in ("delta.db", "delta.db-wal", "data", "checkpoints")
        if (session_dir / name).exists()
    )


def run_governance(b: Bench) -> None:
    """Storage governance: a 100,000-op stress run in a mounted session, a checkpoint every
    1,000 ops, then `gitsess gc` (the retention, through the daemon) with the defaults and
    with `gitsess.log.maxEvents` 20,000: the session's disk bytes against what the live
    view, the kept checkpoints and the kept log need (`show`'s bytes by kind)."""
    from gitsess.overlay import protocol

    repo = b.tmp / "cp-stress"
    _init_repo(repo, b.env)
    names = [f"f{i:02d}.txt" for i in range(20)]
    _write_files(repo, names, 200_000, random.Random(3))
    _commit_all(repo, names, b.env)
    with new_session(b, repo, "stress") as s, cli_mounted(b, repo, s) as view:
        sd = session_dir_of(s)
        start = time.perf_counter()
        for turn in range(STRESS_OPS // 1000):
            _stress(view.root, 1000, turn)
            protocol.checkpoint(str(sd), "turn", "", None, None)
        took = time.perf_counter() - start
        protocol.sync(str(sd))
        steps = [("before gc", None), ("gc, defaults", None), ("gc, log.maxEvents 20000", "20000")]
        for label, max_events in steps:
            if max_events is not None:
                git(repo, "config", "gitsess.log.maxEvents", max_events, env=b.env)
            if label != "before gc":
                gitsess_cli(b, repo, "gc")
            protocol.sync(str(sd))
            kinds = json.loads(gitsess_cli(b, repo, "show", s.name, "--json"))["usage"][
                "bytes_by_kind"
            ]
            need = kinds["files_bytes"] + kinds["checkpoints_bytes"] + kinds["log_bytes"]
            disk = _session_disk(sd)
            b.notes.append(
                f"stress {STRESS_OPS:,} ops ({took:.0f} s, 100 checkpoints), {label}:"
                f" {disk / MIB:.1f} MiB on disk; needed {need / MIB:.1f} MiB (files"
                f" {kinds['files_bytes'] / MIB:.2f}, checkpoints"
                f" {kinds['checkpoints_bytes'] / MIB:.2f}, log {kinds['log_bytes'] / MIB:.2f},"
                f" free {kinds['free_bytes'] / MIB:.2f}): {disk / need:.2f}x (goal < 2x)"
            )


# ---------------------------------------------------------------------------------- diff / apply


def _change_files(root: Path, rels: Sequence[str], tag: str) -> None:
    """Append a line naming the target and run: every commit then has blobs git lacks, as an
    apply of real work does (the same line each time would leave git holding them after the
    first run)."""
    line = f"# changed by the benchmark: {tag}\n".encode()
    for rel in rels:
        with open(root / rel, "ab") as f:
            f.write(line)


def _apply_through(
    b: Bench, target: str, repo: Path, rels: Sequence[str], run: int, later: contextlib.ExitStack
) -> tuple[float, float, float]:
    """git diff and git commit -a in a fresh worktree, directly or through fuse-overlayfs; then,
    for fuse-overlayfs, what its user does to bring the real worktree to that commit (the work
    `apply --commit` does too): unmount and copy the upper directory into the worktree. Returns
    the diff, the commit alone, and the commit with the worktree brought to it. The worktree
    and the view are removed with `later`."""
    wt, branch = b.scratch / f"apply-{target}-{run}", f"bench-apply-{target}-{run}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(wt), env=b.env)
    later.callback(git, repo, "branch", "-q", "-D", branch, env=b.env)
    later.callback(git, repo, "worktree", "remove", "--force", str(wt), env=b.env)
    view = later.enter_context(b.view(target, wt))
    _change_files(view.root, rels, f"{target}, run {run}")
    os.sync()  # the setup's writeback is not the measured commands' work
    t_diff = timed(lambda: _run(["git", "diff"], view.root, b.env))
    t_commit = timed(lambda: _run(["git", "commit", "-qam", "bench"], view.root, b.env))
    t_merge = 0.0
    if view.upper is not None:
        _run(["fusermount3", "-u", str(view.root)])
        upper = view.upper
        t_merge = timed(lambda: _run(["cp", "-a", f"{upper}/.", f"{wt}/"]))
    return t_diff, t_commit, t_commit + t_merge


def _apply_gitsess(
    b: Bench, repo: Path, rels: Sequence[str], run: int, later: contextlib.ExitStack
) -> tuple[float, float]:
    """`gitsess diff` and `gitsess apply --commit` of a session on a worktree of its own,
    edited through its mount and unmounted again (as after `gitsess run`); the session is
    removed with `later`."""
    name = f"bench-apply-{run}"
    session = later.enter_context(new_session(b, repo, name, "--worktree"))
    with cli_mounted(b, repo, session) as view:
        _change_files(view.root, rels, f"{GITSESS}, run {run}")
    os.sync()
    t_diff = timed(lambda: _run([GITSESS_CLI, "diff", name], repo, b.env))
    t_commit = timed(
        lambda: _run([GITSESS_CLI, "apply", name, "--commit", "-m", "bench"], repo, b.env)
    )
    return t_diff, t_commit


def run_apply(b: Bench, corpus: Corpus) -> list[Result]:
    """Worktrees, views and sessions are removed only after the last run: ext4 allocates
    inodes slowly for a while after thousands were freed (`recently_deleted`, seen with
    perf), which would slow whichever target followed a clean-up and created files."""
    n = b.cfg.changed_files
    diff = Result("diff", f"diff of {n:,} changed files")
    commit = Result("apply-commit", f"apply --commit of {n:,} changed files")
    commit_only: list[float] = []
    rels = [f for f in corpus.files if f.startswith("src/")][:n]
    with contextlib.ExitStack() as later:
        for run in range(b.cfg.apply_runs):
            for t in rotation(run):
                if t == GITSESS:
                    d, c = _apply_gitsess(b, corpus.repo, rels, run, later)
                else:
                    d, alone, c = _apply_through(b, t, corpus.repo, rels, run, later)
                    if t == OVERLAYFS:
                        commit_only.append(alone)
                diff.add(t, d)
                commit.add(t, c)
    progress(diff)
    progress(commit)
    b.notes.append(
        "diff / apply --commit: native runs `git diff` and `git commit -a` in a fresh worktree "
        "where the files were changed; fuse-overlayfs runs them in its mount over such a worktree, "
        "then is unmounted and its upper directory copied into the worktree (`cp -a`), which "
        "brings the real worktree to the commit as `apply --commit` does; gitsess runs `gitsess "
        "diff` and `gitsess apply --commit` on an unmounted session with a worktree of its own. "
        "`git commit -a` alone in the fuse-overlayfs mount: "
        + fmt_time(statistics.median(commit_only))
    )
    return [diff, commit]


# ---------------------------------------------------------------------------- conflict radar

RADAR = "radar"
RADAR_SESSIONS, RADAR_PATHS = 20, 100


def run_radar(b: Bench, corpus: Corpus) -> None:
    """`gitsess overlaps --json` over 20 unmounted sessions of 100 changed files each, every
    session sharing half its files with the next (so 19 pairs are merged in memory); a
    gitsess-only figure (no other tool has one), with its goal of 1 s in the notes."""
    rels = [f for f in corpus.files if f.startswith("src/")]
    step = RADAR_PATHS // 2
    if len(rels) < step * (RADAR_SESSIONS + 1):
        b.notes.append(f"{RADAR}: skipped, the corpus has too few files")
        return
    times: list[float] = []
    with contextlib.ExitStack() as later:
        for n in range(RADAR_SESSIONS):
            session = later.enter_context(new_session(b, corpus.repo, f"bench-radar-{n}"))
            with cli_mounted(b, corpus.repo, session) as view:
                _change_files(view.root, rels[n * step : n * step + RADAR_PATHS], f"radar {n}")
        cpu: list[float] = []
        for _ in range(max(b.cfg.apply_runs, 3)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(
                timed(lambda: _run([GITSESS_CLI, "overlaps", "--json"], corpus.repo, b.env))
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    # CPU time too: on a loaded machine the wall time is mostly waiting for a core.
    b.notes.append(
        f"{RADAR}: `gitsess overlaps --json` of {RADAR_SESSIONS} sessions x {RADAR_PATHS} changed "
        f"files (19 overlapping pairs), median of {len(times)}: "
        f"{fmt_time(statistics.median(times))} wall, {fmt_time(statistics.median(cpu))} CPU "
        "(goal: under 1 s)"
    )


# ----------------------------------------------------------------------------- gated apply

GATE = "gate"
GATE_PATHS = 10


def run_gate(b: Bench, corpus: Corpus) -> None:
    """`gitsess apply --commit --test true` of a session of 10 changed files in the corpus,
    against the same apply without `--test` in the same run: the
    difference is what building the test's view of the result costs. A gitsess-only figure."""
    rels = [f for f in corpus.files if f.startswith("src/")][:GATE_PATHS]
    times: dict[str, list[float]] = {"gated": [], "plain": []}
    with contextlib.ExitStack() as later:
        for run in range(max(b.cfg.apply_runs, 3)):
            for kind in ("gated", "plain") if run % 2 else ("plain", "gated"):
                name = f"bench-gate-{kind}-{run}"
                session = later.enter_context(new_session(b, corpus.repo, name))
                with cli_mounted(b, corpus.repo, session) as view:
                    _change_files(view.root, rels, f"gate {kind} {run}")
                test = ["--test", "true"] if kind == "gated" else []
                apply = [GITSESS_CLI, "apply", name, "--commit", "-m", "bench", *test]
                times[kind].append(timed(functools.partial(_run, apply, corpus.repo, b.env)))
    gated, plain = statistics.median(times["gated"]), statistics.median(times["plain"])
    b.notes.append(
        f"{GATE}: `gitsess apply --commit --test true` of {GATE_PATHS} changed files in the "
        f"{len(corpus.files):,}-file corpus, median of {len(times['gated'])}: {fmt_time(gated)}; "
        f"without --test {fmt_time(plain)} (the gate's own cost: {fmt_time(gated - plain)})"
    )


# ---------------------------------------------------------------------- git in a session

# Times git commands from inside one long-lived process, so that neither the process's nor
# (inside `gitsess run`) the mount's start is counted. One JSON request a line on stdin: `edit`
# appends `line` to those files and `prep` runs commands, untimed; then `cmd` runs, timed. One
# JSON answer a line on stdout, the first `{"ready": true}`.
GIT_TIMER = """\
import json, subprocess, sys, time
print(json.dumps({"ready": True}), flush=True)
for text in sys.stdin:
    req = json.loads(text)
    for rel in req.get("edit", []):
        with open(rel, "ab") as f:
            f.write(req["line"].encode())
    for cmd in req.get("prep", []):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    t0 = time.perf_counter()
    if req.get("cmd"):
        subprocess.run(req["cmd"], check=True, stdout=subprocess.DEVNULL)
    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)
"""

GIT_SESSION = "git-session"  # --only: every row below
GIT_TARGETS = (NATIVE, GITSESS)
HISTORY_COMMITS = 150  # `git log -100` needs 100
DIFF_FILES = 5


@dataclass(frozen=True)
class GitOp:
    key: str
    label: str
    cmd: tuple[str, ...]
    cold: bool = False
    goals: tuple[Goal, ...] = ()


def git_ops() -> list[GitOp]:
    return [
        GitOp("git-session-status-warm", "git status in a session (warm)", ("git", "status"),
              goals=(Goal(NATIVE, 1.3),)),
        GitOp("git-session-status-cold", "git status in a session (cold)", ("git", "status"),
              cold=True),
        GitOp("git-session-commit", "git commit of 1 file in a session",
              ("git", "commit", "-q", "-m", "bench")),
        # every file changed, then `git add -A && git commit`: 5,000 new loose objects and
        # the trees, written into the session's delta (issue 36: objects copy-on-write)
        GitOp("git-session-commit-all", "commit 5,000 files inside a session",
              ("sh", "-c", "git add -A && git commit -q -m bench"), goals=(Goal(NATIVE, 1.5),)),
        GitOp("git-session-log", "git log -100 in a session", ("git", "log", "-100")),
        GitOp("git-session-diff", f"git diff of {DIFF_FILES} files in a session", ("git", "diff")),
    ]  # fmt: skip


def git_session_selected(only: Sequence[str]) -> bool:
    return not only or GIT_SESSION in only or any(op.key in only for op in git_ops())


def build_history_repo(repo: Path, cfg: Config, env: dict[str, str]) -> list[str]:
    """The corpus's files (no big file) committed as one pack, then `HISTORY_COMMITS` commits
    each appending a line to one file (`git fast-import`), the files on disk at the tip."""
    rng = random.Random(28)
    _init_repo(repo, env)
    rels = _layout(cfg.small_files, cfg.dirs, cfg.bulk_files)
    _write_files(repo, rels, cfg.corpus_mib * MIB, rng)
    _commit_all(repo, rels, env)
    stream = bytearray()
    for k in range(HISTORY_COMMITS):
        rel = rels[(k * 37) % len(rels)]
        path = repo / rel
        with open(path, "ab") as f:
            f.write(f"# history {k}\n".encode())
        data = path.read_bytes()
        stream += b"commit refs/heads/main\n"
        stream += b"committer Bench <bench@example.com> %d +0000\n" % (1700000000 + 60 * (k + 1))
        stream += b"data 9\nhistory\n\n"
        if k == 0:
            stream += b"from refs/heads/main^0\n"
        stream += b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(data), data)
    subprocess.run(
        ["git", "fast-import", "--quiet", "--force"], cwd=repo, env=env, input=bytes(stream),
        check=True,
    )  # fmt: skip
    git(repo, "reset", "-q", env=env)
    git(repo, "update-index", "-q", "--refresh", env=env)
    return rels


class GitTimer:
    """A running GIT_TIMER: natively in the repository, or inside `gitsess run` over it."""

    def __init__(self, b: Bench, target: str, repo: Path, session: str | None) -> None:
        timer = b.tmp / "git_timer.py"
        if not timer.exists():
            timer.write_text(GIT_TIMER)
        cmd = [sys.executable, str(timer)]
        if target == GITSESS:
            cmd = [GITSESS_CLI, "run", "-s", str(session), "--", *cmd]
        self.proc = subprocess.Popen(
            cmd, cwd=repo, env=b.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.read()

    def read(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the git timer ended: {self.proc.wait()}")
        answer: dict[str, object] = json.loads(line)
        return answer

    def ask(self, **req: object) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return float(str(self.read()["seconds"]))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        if self.proc.wait(timeout=30) != 0:
            raise RuntimeError(f"the git timer exited {self.proc.returncode}")


def _wait_unmounted(session_dir: Path, timeout: float = 30) -> None:
    """Until the session's daemon is gone, so that the next `gitsess run` starts a fresh one."""
    deadline = time.monotonic() + timeout
    while mount.status(session_dir) is not None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the daemon of session {session_dir.name} did not stop")
        time.sleep(0.05)


def _git_op_once(
    timer: GitTimer, op: GitOp, tag: str, rels: Sequence[str], pid: int | None
) -> tuple[float, float | None]:
    """One timed run of `op` (its untimed preparation first), and the daemon's CPU time."""
    if op.key == "git-session-commit":
        rel = rels[-1]
        timer.ask(
            edit=[rel], line=f"# committed by the benchmark: {tag}\n", prep=[["git", "add", rel]]
        )
    elif op.key == "git-session-commit-all":
        timer.ask(edit=list(rels), line=f"# all committed by the benchmark: {tag}\n")
    before = daemon_cpu_seconds(pid) if pid is not None else None
    seconds = timer.ask(cmd=list(op.cmd))
    after = daemon_cpu_seconds(pid) if pid is not None else None
    return seconds, (after - before if after is not None and before is not None else None)


def run_git_session(b: Bench, only: Sequence[str], cold_ok: bool) -> list[Result]:
    """git inside one long-lived `gitsess run` (in place) against the same git natively, on two
    copies of one repository of 5,000 files and 151 commits (each target changes its own)."""
    ops = [
        op for op in git_ops()
        if (not only or GIT_SESSION in only or op.key in only) and (cold_ok or not op.cold)
    ]  # fmt: skip
    console.log("building the repository with history")
    repos = {NATIVE: b.tmp / "git-native", GITSESS: b.tmp / "git-session"}
    rels = build_history_repo(repos[NATIVE], b.cfg, b.env)
    _run(["cp", "-a", str(repos[NATIVE]), str(repos[GITSESS])])
    git(repos[GITSESS], "update-index", "-q", "--refresh", env=b.env)
    for t in GIT_TARGETS:  # the changes `git diff` shows, and `git status` too
        for rel in rels[: DIFF_FILES * 50 : 50]:
            with open(repos[t] / rel, "ab") as f:
                f.write(b"# changed for git diff\n")
    os.sync()
    session = gitsess_new(b, repos[GITSESS], "bench-git")
    results = []
    try:
        for op in ops:
            res = Result(op.key, op.label, list(op.goals))
            if op.cold:
                _git_cold(b, op, repos, session, rels, res)
            else:
                _git_warm(b, op, repos, session, rels, res)
            progress(res)
            results.append(res)
    finally:
        subprocess.run(
            [GITSESS_CLI, "rm", session.name, "--force"], cwd=repos[GITSESS], env=b.env,
            capture_output=True,
        )  # fmt: skip
    b.notes.append(
        "git ... in a session: git run by one long-lived process natively in a repository of "
        f"5,000 files and {HISTORY_COMMITS + 1} commits, with {DIFF_FILES} files changed, and "
        "inside one long-lived `gitsess run` (in place) over a copy of it (its .git copy-on-write "
        "through the daemon); cold: caches dropped, a fresh `gitsess run` and daemon each run"
    )
    return results


def _git_warm(
    b: Bench, op: GitOp, repos: dict[str, Path], session: Session, rels: Sequence[str],
    res: Result,
) -> None:  # fmt: skip
    timers: dict[str, GitTimer] = {}
    try:
        for t in GIT_TARGETS:
            timers[t] = GitTimer(b, t, repos[t], session.name)
        live = mount.status(session_dir_of(session))
        pids = {NATIVE: None, GITSESS: live.daemon_pid if live is not None else None}
        for t in GIT_TARGETS:
            _git_op_once(timers[t], op, "warm-up", rels, pids[t])  # not counted
        for run in range(b.cfg.runs):
            for t in GIT_TARGETS[run % 2 :] + GIT_TARGETS[: run % 2]:
                res.add(t, *_git_op_once(timers[t], op, f"{t} {run}", rels, pids[t]))
    finally:
        for timer in timers.values():
            timer.close()
        _wait_unmounted(session_dir_of(session))


def _git_cold(
    b: Bench, op: GitOp, repos: dict[str, Path], session: Session, rels: Sequence[str],
    res: Result,
) -> None:  # fmt: skip
    for run in range(b.cfg.runs):
        for t in GIT_TARGETS[run % 2 :] + GIT_TARGETS[: run % 2]:
            timer = GitTimer(b, t, repos[t], session.name)
            try:
                live = mount.status(session_dir_of(session)) if t == GITSESS else None
                drop_caches()
                res.add(
                    t,
                    *_git_op_once(timer, op, f"{t} {run}", rels, live.daemon_pid if live else None),
                )
            finally:
                timer.close()
                _wait_unmounted(session_dir_of(session))


# ---------------------------------------------------------------------------------- fleets

FLEET = "fleet"
FIRST_STATUS = "first-status"  # --only: the fleet's first-status row alone


def _family(pid: int) -> list[int]:
    """`pid` and every process below it (a daemon: its guard and its watch process)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
    return found


def _memory_kib(pids: Sequence[int]) -> tuple[int, int]:
    """Resident and proportional set size (RSS, PSS) of `pids` together, in KiB: RSS counts a
    page shared by two processes twice (a forked guard's every page), PSS half in each."""
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == "Rss":
                    rss += int(rest.split()[0])
                elif key == "Pss":
                    pss += int(rest.split()[0])
    return rss, pss


def _watched(session_dir: Path) -> bool:
    from gitsess.overlay import protocol

    st = protocol.status(str(session_dir))
    return st is not None and st.watched


def run_fleet(b: Bench, corpus: Corpus) -> list[Result]:
    """`fleet_sessions` sessions of one repository mounted at once (idle, each watch in
    place): their processes' memory, against as many fuse-overlayfs mounts of it, with each
    daemon a process of its own (as a library call starts it) and forked from the user's spare
    (as `gitsess new --mount` starts it); then the first `git status` in a session just
    mounted, against native and a fresh fuse-overlayfs."""
    n = b.cfg.fleet_sessions
    for target in (OVERLAYFS, GITSESS):
        with contextlib.ExitStack() as stack:
            views = [stack.enter_context(b.view(target, corpus.repo)) for _ in range(n)]
            if target == GITSESS:
                _wait_watched([_session_dir_of(v) for v in views])
            pids = [p for v in views if v.pid is not None for p in _family(v.pid)]
            what = "daemons started by themselves" if target == GITSESS else target
            _fleet_note(b, n, what, pids)
    names = [f"fleet-{i}" for i in range(n)]
    try:
        ids = [
            str(json.loads(gitsess_cli(b, corpus.repo, "new", name, "--mount", "--json"))["id"])
            for name in names
        ]
        dirs = [discover(corpus.repo).session_dir(i) for i in ids]
        _wait_watched(dirs)
        daemons = [st.daemon_pid for st in (mount.status(d) for d in dirs) if st is not None]
        spares = {_parent(pid) for pid in daemons}
        _fleet_note(b, n, "daemons forked from the spare", [
            *spares, *(p for pid in daemons for p in _family(pid))
        ])  # fmt: skip
    finally:
        for name in names:
            subprocess.run(
                [GITSESS_CLI, "rm", name, "--force"], cwd=corpus.repo, env=b.env,
                capture_output=True, check=False,
            )  # fmt: skip
    return [_first_status(b, corpus), _commits(b, corpus)]


COMMITS = 200


def _commits(b: Bench, corpus: Corpus) -> Result:
    """`COMMITS` commits of one changed file each, one after another, inside a view: natively
    in a copy of the repository made for each run, in fuse-overlayfs and gitsess over it, each
    run a fresh view (the commits stay in its upper layer or delta)."""
    res = Result("commits", f"{COMMITS} commits inside", [Goal(NATIVE, 1.3)])
    rel = corpus.files[0]
    script = (
        f"for i in $(seq {COMMITS}); do echo $i >> {shlex.quote(rel)};"
        " git commit -qam c$i || exit 1; done"
    )
    for run in range(b.cfg.slow_runs):
        for target in rotation(run):
            lower = corpus.repo
            if target == NATIVE:
                lower = b.scratch / f"commits-{run}"
                _run(["cp", "-a", str(corpus.repo), str(lower)])
            try:
                with b.view(target, lower) as view:
                    step = functools.partial(_run, ["sh", "-c", script], view.root, b.env)
                    res.add(target, timed(step))
            finally:
                if target == NATIVE:
                    shutil.rmtree(lower, ignore_errors=True)
    progress(res)
    return res


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def _wait_watched(dirs: Sequence[Path]) -> None:
    deadline = time.monotonic() + 120
    while not all(_watched(d) for d in dirs) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)


def _fleet_note(b: Bench, n: int, what: str, pids: Sequence[int]) -> None:
    rss, pss = _memory_kib(pids)
    b.notes.append(
        f"{n} sessions mounted, {what} ({len(pids)} processes): RSS {rss / 1024:.0f} MiB in "
        f"all, {rss / 1024 / n:.1f} per session; PSS {pss / 1024:.0f} MiB in all, "
        f"{pss / 1024 / n:.1f} per session"
    )
    console.log(b.notes[-1])


def _session_dir_of(view: View) -> Path:
    """The session dir of the daemon that serves `view` (the dir of its delta.db)."""
    assert view.pid is not None
    with open(f"/proc/{view.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    return Path(os.fsdecode(argv[argv.index(b"--delta") + 1])).parent


def _first_status(b: Bench, corpus: Corpus) -> Result:
    """`git status` once in a view just mounted (the page cache warm), the way a coding
    agent's first command goes; natively, the same `git status` in the repository."""
    from gitsess.services import live

    res = Result(FIRST_STATUS, "first git status in a new session (warm)", [Goal(NATIVE, 2.0)])
    # gitsess as `gitsess run` sets git up; natively and on fuse-overlayfs the untracked cache
    # alone (gitsess's hook would only answer "everything" there, after its own start).
    config = live.git_config_env(b.env, live.git_config_for(corpus.repo))
    plain = live.git_config_env(b.env, live.UNTRACKED_CACHE_CONFIG)
    _run(["git", "status", "--porcelain"], cwd=corpus.repo)  # the page cache warm
    for run in range(b.cfg.runs):
        for target in rotation(run):
            with b.view(target, corpus.repo) as view:
                env = {**b.env, **(config if target == GITSESS else plain)}
                if target == GITSESS:
                    # The hook finds the daemon at `$GITSESS_DIR/sessions/<id>`, as in a
                    # session made by `gitsess new`.
                    session_dir = _session_dir_of(view)
                    state = b.scratch / "hook-state"
                    (state / "sessions").mkdir(parents=True, exist_ok=True)
                    (state / "sessions" / session_dir.name).symlink_to(session_dir)
                    env["GITSESS_SESSION_ID"] = session_dir.name
                    env["GITSESS_DIR"] = str(state)
                status = functools.partial(_run, ["git", "status", "--porcelain"], view.root, env)
                res.add(target, timed(status))
    progress(res)
    return res


# ---------------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class ProfileRow:
    function: str
    calls: int
    own: float  # seconds in the function itself
    cumulative: float


def _where(key: tuple[str, int, str]) -> str:
    filename, _, name = key
    if filename == "~":
        return name  # a builtin
    parts = Path(filename).parts
    short = "/".join(parts[parts.index("gitsess") :]) if "gitsess" in parts else parts[-1]
    return f"{short}:{name}"


# Where the daemon's event loop waits for the kernel: idle time, not work.
IDLE = ("<method 'poll' of 'select.epoll' objects>",)


def summarize_profile(path: Path, top: int = 15) -> tuple[float, list[ProfileRow]]:
    """Busy seconds of the daemon's main thread, and its functions by their own time."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = [
        ProfileRow(_where(key), nc, tt, ct)
        for key, (_, nc, tt, ct, _) in raw.items()
        if key[2] not in IDLE
    ]
    busy = sum(r.own for r in rows)
    rows.sort(key=lambda r: r.own, reverse=True)
    return busy, rows[:top]


def handler_calls(path: Path) -> list[ProfileRow]:
    """The FUSE handlers of gitsess/overlay/fs.py: how often the kernel asked, and their cost."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = [
        ProfileRow(_where(key), nc, tt, ct)
        for key, (_, nc, tt, ct, _) in raw.items()
        if key[0].endswith("overlay/fs.py") and not key[2].startswith("_") and key[2] != "wrapper"
    ]
    return sorted(rows, key=lambda r: r.cumulative, reverse=True)


def profile_tables(path: Path) -> list[Table]:
    busy, rows = summarize_profile(path)
    t = Table(title=f"gitsess daemon under cProfile: {path.stem} ({busy:.2f} s busy)")
    t.add_column("function (own time)")
    t.add_column("calls", justify="right")
    t.add_column("own", justify="right")
    t.add_column("cumulative", justify="right")
    for r in rows:
        t.add_row(r.function, f"{r.calls:,}", share(r.own, busy), share(r.cumulative, busy))
    h = Table(title=f"FUSE requests served: {path.stem}")
    h.add_column("handler")
    h.add_column("calls", justify="right")
    h.add_column("cumulative", justify="right")
    for r in handler_calls(path):
        h.add_row(r.function, f"{r.calls:,}", share(r.cumulative, busy))
    return [t, h]


def share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


# ---------------------------------------------------------------------------------- output


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def fmt_cpu(seconds: float | None) -> str:
    """CPU time, counted in ticks of 10 ms: whole milliseconds."""
    if seconds is None:
        return "-"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{round(seconds * 1000)} ms"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def fmt_kib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def _goal_text(res: Result) -> str:
    met = res.goal_met()
    verdict = "" if met is None else (" met" if met else " MISSED")
    return ", ".join(_one_goal(res, g) for g in res.goals) + verdict


def _one_goal(res: Result, goal: Goal) -> str:
    k, n = res.runs_within(goal)
    if n == 0:
        return str(goal)
    return f"{goal} ({k}/{n} runs{'' if res.decided(goal) else ', a tie'})"


def result_rows(results: Sequence[Result]) -> list[list[str]]:
    return [
        [
            res.label,
            *[fmt_time(res.median(x)) for x in TARGETS],
            fmt_ratio(res.ratio(GITSESS, NATIVE)),
            fmt_ratio(res.ratio(GITSESS, OVERLAYFS)),
            _goal_text(res),
        ]
        for res in results
    ]


RESULT_HEADER = ["workload", *TARGETS, "gitsess / native", "gitsess / fuse-overlayfs", "goal"]


def cpu_rows(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for res in results:
        ovl, ours = res.cpu_median(OVERLAYFS), res.cpu_median(GITSESS)
        if ovl is None and ours is None:
            continue
        ratio = ours / ovl if ours is not None and ovl else None
        rows.append([res.label, fmt_cpu(ovl), fmt_cpu(ours), fmt_ratio(ratio)])
    return rows


CPU_HEADER = ["workload", OVERLAYFS, GITSESS, "gitsess / fuse-overlayfs"]


def creation_rows(items: Sequence[Creation]) -> list[list[str]]:
    return [[f"{c.files:,} files", *[fmt_time(v) for v in c.medians().values()]] for c in items]


CREATION_HEADER = [
    "repository",
    "gitsess new",
    "gitsess mount",
    "new + mount",
    "new --mount",
    "git worktree add",
]


def memory_rows(memory: Memory) -> list[list[str]]:
    return [
        [where, *[fmt_kib(peaks.get(x)) for x in (OVERLAYFS, GITSESS)]]
        for where, peaks in memory.peaks.items()
    ]


MEMORY_HEADER = ["daemon peak memory (VmHWM) after", OVERLAYFS, GITSESS]


def rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    t = Table(title=title)
    for i, name in enumerate(header):
        t.add_column(name, justify="left" if i == 0 or name == "goal" else "right")
    for row in rows:
        t.add_row(*[_colour(cell) for cell in row])
    return t


def _colour(cell: str) -> str:
    return cell.replace("MISSED", "[red]MISSED[/]").replace(" met", " [green]met[/]")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    align = ["---" if i == 0 or h == "goal" else "---:" for i, h in enumerate(header)]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def machine(load_at_start: float, revision: str) -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    df = subprocess.run(
        ["df", "--output=fstype", tempfile.gettempdir()], capture_output=True, text=True
    )
    ovl = subprocess.run(["fuse-overlayfs", "--version"], capture_output=True, text=True)
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "fs": (df.stdout.split() or ["unknown"])[-1],
        "python": platform.python_version(),
        "git": git(Path.cwd(), "--version").strip(),
        "gitsess": revision,
        "fuse-overlayfs": next(
            (
                ln.split("version", 1)[1].strip()
                for ln in ovl.stdout.splitlines()
                if ln.startswith("fuse-overlayfs")
            ),
            "unknown",
        ),
        "reclaim": _proactive_reclaim(),
        # Other work on the machine skews every figure: say how busy it was.
        "load": f"{load_at_start:.1f} at start, {os.getloadavg()[0]:.1f} at end (1-min average)",
    }


def _proactive_reclaim() -> str:
    """Whether DAMON pages out cold memory on this machine: then "warm" caches (page cache,
    dentries, inodes) partly go between the warm-up and the timed run, for every target."""
    schemes = Path("/sys/kernel/mm/damon/admin/kdamonds")
    actions = set()
    for state in schemes.glob("*/state"):
        with contextlib.suppress(OSError):
            if state.read_text().strip() == "on":
                for action in state.parent.glob("contexts/*/schemes/*/action"):
                    actions.add(action.read_text().strip())
    return f"DAMON {', '.join(sorted(actions))}" if actions else "none"


def _gitsess_revision() -> str:
    """The commit of the gitsess code measured (`-dirty` when it had uncommitted changes)."""
    source = Path(gitsess.__file__).resolve().parent.parent
    done = subprocess.run(
        ["git", "-C", str(source), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


@dataclass
class Report:
    machine: dict[str, str]
    config: Config
    results: list[Result]
    creation: list[Creation]
    memory: Memory
    notes: list[str]
    seconds: float = 0.0
    cli_start: CliStart | None = None

    def headline(self) -> str:
        m = self.machine
        return (
            f"gitsess benchmark ({'quick' if self.config.quick else 'full'}, medians of "
            f"{self.config.runs} runs ({self.config.slow_runs} for the slow workloads, "
            f"{self.config.apply_runs} for diff / apply, {self.config.creation_runs} for session "
            f"start), {self.seconds:.0f} s, gitsess {m['gitsess']}): "
            f"{m['cpu']}, {m['cores']} cores, "
            f"{m['memory']}, Linux {m['kernel']}, {m['fs']}, fuse-overlayfs {m['fuse-overlayfs']}; "
            f"proactive reclaim: {m['reclaim']}; load {m['load']}"
        )

    def tables(self) -> list[tuple[str, list[str], list[list[str]]]]:
        tables = []
        if self.results:
            tables.append(("Median wall time", RESULT_HEADER, result_rows(self.results)))
        cpu = cpu_rows(self.results)
        if cpu:
            tables.append(("FUSE daemon CPU time per run (median)", CPU_HEADER, cpu))
        if self.creation:
            tables.append(
                ("Session creation + first mount (median)", CREATION_HEADER,
                 creation_rows(self.creation))
            )  # fmt: skip
        if self.memory.peaks:
            tables.append(("FUSE daemon peak memory", MEMORY_HEADER, memory_rows(self.memory)))
        if self.cli_start is not None:
            tables.append(
                ("cli start (whole process, median)", CLI_START_HEADER,
                 cli_start_rows(self.cli_start))
            )  # fmt: skip
        return tables

    def markdown(self) -> str:
        parts = [self.headline() + "\n"]
        parts += [markdown_table(header, rows) for _, header, rows in self.tables()]
        parts += [f"- {note}\n" for note in self.notes]
        return "\n".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "config": asdict(self.config),
            "workloads": [
                {
                    "key": r.key,
                    "label": r.label,
                    "times": r.times,
                    "daemon_cpu": r.cpu,
                    "median": {t: r.median(t) for t in r.times},
                    "ratio_to_native": r.ratio(GITSESS, NATIVE),
                    "ratio_to_fuse_overlayfs": r.ratio(GITSESS, OVERLAYFS),
                    "goals": [str(g) for g in r.goals],
                    "goal_met": r.goal_met(),
                    "goal_runs_within": {str(g): r.runs_within(g) for g in r.goals},
                    "goal_decided": {str(g): r.decided(g) for g in r.goals},
                }
                for r in self.results
            ],
            "session_start": [
                {
                    "files": c.files,
                    "gitsess_new": c.new,
                    "gitsess_mount": c.mount,
                    "gitsess_total": c.total,
                    "gitsess_new_mount": c.new_mount,
                    "git_worktree_add": c.worktree_add,
                    "median": c.medians(),
                }
                for c in self.creation
            ],
            "peak_memory_kib": self.memory.peaks,
            "cli_start": None if self.cli_start is None else self.cli_start.times,
            "notes": self.notes,
            "seconds": self.seconds,
        }


def render(report: Report) -> None:
    out.print(report.headline())
    for title, header, rows in report.tables():
        out.print(rich_table(title, header, rows))
    for note in report.notes:
        out.print(f"note: {note}")


# ---------------------------------------------------------------------------------- main


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a subset, under a minute")
    p.add_argument(
        "--runs",
        type=int,
        help="runs per figure (default 9; 5 for the slow workloads and diff / apply; --quick 3)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown tables")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="KEY",
        help="only this workload (repeatable; also `session-start`, `apply`, `git-session`,"
        " `cli-start`, `fleet`, `first-status`, `checkpoints`, `radar`, `gate`)",
    )
    p.add_argument(
        "--profile", type=Path, metavar="DIR", help="cProfile the gitsess daemon (extra runs)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument(
        "--extra",
        action="store_true",
        help="also untar, cp -a, mv, chmod -R, sed -i of a lower directory, and python -m venv"
        " (a few minutes more)",
    )
    return p.parse_args(argv)


def select(cfg: Config, only: Sequence[str], cold_ok: bool) -> list[Workload]:
    chosen = [
        w
        for w in workloads()
        if (w.key in only if only else (w.quick or not cfg.quick) and (cfg.extra or not w.extra))
    ]
    return [w for w in chosen if cold_ok or not w.cold]


def preflight() -> None:
    missing = [tool for tool in ("fuse-overlayfs", "fusermount3", "git") if not shutil.which(tool)]
    if missing:
        raise SystemExit(f"bench: missing {', '.join(missing)}")
    if not Path("/dev/fuse").exists():
        raise SystemExit("bench: /dev/fuse is missing")


def cache_bytecode() -> None:
    """Measure gitsess as it runs once installed, with its modules' bytecode cached. With
    PYTHONDONTWRITEBYTECODE set (this machine sets it) every command and every daemon would
    compile the modules it imports from source: about 60 ms of `gitsess diff` alone."""
    compileall.compile_dir(Path(gitsess.__file__).parent, quiet=1)


def run_all(b: Bench, only: Sequence[str]) -> Report:
    load_at_start, revision = os.getloadavg()[0], _gitsess_revision()
    cold_ok = can_drop_caches()
    if not cold_ok:
        b.notes.append("cold workloads skipped: dropping the page cache needs root")
    chosen = select(b.cfg, only, cold_ok)
    results: list[Result] = []
    creation: list[Creation] = []
    if (
        chosen
        or not only
        or {"session-start", "apply", FLEET, FIRST_STATUS, RADAR, GATE} & set(only)
    ):
        console.log(f"building the corpus in {b.tmp}")
        corpus = build_corpus(b.tmp / "corpus", b.cfg, b.env)
        results += run_shared(b, [w for w in chosen if not w.mutates], corpus)
        results += run_mutating(b, [w for w in chosen if w.mutates], corpus)
    if b.profile_dir is not None and chosen:
        run_profiles(b, chosen, corpus)
    if not only or "session-start" in only:
        repos = [(corpus.repo, b.cfg.small_files)]
        if not b.cfg.quick:
            console.log(f"building the {b.cfg.wide_files:,}-file repository")
            wide = b.tmp / "wide"
            rels = build_wide_repo(wide, b.cfg.wide_files, b.env)
            run_wide_memory(b, wide, rels)
            repos.append((wide, b.cfg.wide_files))
        creation = run_creation(b, repos)
    if not b.cfg.quick and (not only or "apply" in only):
        if cli_has(b, "diff", "apply"):
            results += run_apply(b, corpus)
        else:
            b.notes.append("diff / apply --commit: not yet available (no such gitsess commands)")
    if "checkpoints" in only or (not only and not b.cfg.quick):
        run_checkpoints(b)
        run_governance(b)
    if (not b.cfg.quick and not only) or RADAR in only:
        if cli_has(b, "overlaps"):
            run_radar(b, corpus)
        else:
            b.notes.append(f"{RADAR}: not yet available (no `gitsess overlaps`)")
    if (not b.cfg.quick and not only) or GATE in only:
        run_gate(b, corpus)
    if git_session_selected(only) and (only or not b.cfg.quick):
        results += run_git_session(b, only, cold_ok)
    if FLEET in only or not (only or b.cfg.quick):
        results += run_fleet(b, corpus)
    elif FIRST_STATUS in only:
        results.append(_first_status(b, corpus))
    cli_start = None
    if not only or "cli-start" in only:
        cli_start = run_cli_start(b, corpus.repo if chosen else build_corpus_small(b))
    order = [w.key for w in workloads()] + ["diff", "apply-commit"] + [g.key for g in git_ops()]
    order += [FIRST_STATUS, "commits"]
    results.sort(key=lambda r: order.index(r.key))
    report = Report(machine(load_at_start, revision), b.cfg, results, creation, b.memory, b.notes)
    report.cli_start = cli_start
    return report


def build_corpus_small(b: Bench) -> Path:
    """A repository of two files: the small commands' start does not depend on its size."""
    repo = b.tmp / "cli-start"
    _init_repo(repo, b.env)
    (repo / "README.md").write_text("bench\n")
    _commit_all(repo, ["README.md"], b.env)
    return repo


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    preflight()
    cache_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="gitsess-bench-"))
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    b = Bench(
        Config.make(args.quick, args.runs, args.extra),
        tmp,
        isolated_env(tmp / "home"),
        args.profile,
    )
    started = time.perf_counter()
    try:
        report = run_all(b, args.only)
        report.seconds = time.perf_counter() - started
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    render(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(report.markdown())
    if args.profile is not None:
        for path in sorted(args.profile.glob("*.prof")):
            try:
                tables = profile_tables(path)
            except (OSError, EOFError, TypeError, ValueError) as e:
                console.log(f"cannot read {path}: {e}")
                continue
            for table in tables:
                out.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
