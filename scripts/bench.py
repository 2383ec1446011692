#!/usr/bin/env python3
"""Benchmark a gitsess session mount against a native directory and fuse-overlayfs.

Builds a corpus in a temporary directory (a git repository of about 5,000 small files in 400
directories, ~50 MB, plus one 500 MB file git ignores), then measures the same workloads on
three views of that one tree, in one run: the directory itself (native), fuse-overlayfs over it,
and a gitsess session mount over it. Every figure is the median of several runs; cold runs drop
the page cache first (root only). Also measured: session creation + first mount against
`git worktree add` on a 5,000- and a 50,000-file repository, `gitsess diff` / `apply --commit`
of 1,000 changed files (when the CLI has them), and the daemons' peak memory (VmHWM).

    sudo .venv/bin/python scripts/bench.py                 # the full run (~10 minutes)
    .venv/bin/python scripts/bench.py --quick              # a subset, under a minute
    .venv/bin/python scripts/bench.py --json out.json      # also write the results as JSON
    .venv/bin/python scripts/bench.py --profile prof/      # also py-spy the daemon (extra runs)

Ratios vary with the machine and its load: read them, never assert them in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gitsess import mount

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 150)

NATIVE = "native"
OVERLAYFS = "fuse-overlayfs"
GITSESS = "gitsess"
TARGETS = (NATIVE, OVERLAYFS, GITSESS)
MIB = 1024 * 1024
VENV_BIN = Path(sys.executable).parent
GITSESS_CLI = str(VENV_BIN / "gitsess")

Step = Callable[[], None]


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Config:
    quick: bool
    runs: int
    big_mib: int  # the file outside git
    write_mib: int  # sequential write + fsync
    small_files: int = 5000
    dirs: int = 400
    corpus_mib: int = 50
    create_files: int = 2000
    bulk_files: int = 2000  # the lower directory `rm -rf` removes
    wide_files: int = 50_000  # the second repository for session creation
    changed_files: int = 1000  # diff / apply --commit
    creation_runs: int = 3
    slow_runs: int = 5  # for the workloads that take seconds each (file creation)

    @staticmethod
    def make(quick: bool, runs: int | None) -> Config:
        if quick:
            return Config(
                quick=True,
                runs=runs or 3,
                big_mib=64,
                write_mib=64,
                creation_runs=1,
                slow_runs=runs or 1,
            )
        return Config(quick=False, runs=runs or 5, big_mib=500, write_mib=500, slow_runs=runs or 5)


# ---------------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Corpus:
    repo: Path
    files: list[str]  # every regular file git tracks, relative
    dirs: list[str]  # every directory outside .git, relative
    big: str  # the large file git ignores, relative
    bulk: str  # a directory holding `bulk_files` files, relative

    @property
    def paths(self) -> list[str]:
        return [*self.dirs, *self.files, self.big]


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


def _layout(files: int, dirs: int, bulk_files: int) -> tuple[list[str], str]:
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
    return rels, "vendor"


def _commit_all(repo: Path, env: dict[str, str]) -> None:
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "corpus", env=env)
    git(repo, "gc", "-q", env=env)


def _init_repo(repo: Path, env: dict[str, str]) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main", env=env)


def build_corpus(repo: Path, cfg: Config, env: dict[str, str]) -> Corpus:
    rng = random.Random(8)
    _init_repo(repo, env)
    rels, bulk = _layout(cfg.small_files, cfg.dirs, cfg.bulk_files)
    _write_files(repo, rels, cfg.corpus_mib * MIB, rng)
    (repo / ".gitignore").write_text("/data/\n")
    _commit_all(repo, env)
    big = "data/big.bin"
    _write_big(repo / big, cfg.big_mib, rng)
    dirs = sorted(
        {str(Path(r).parent) for r in rels} | {str(p) for r in rels for p in Path(r).parents}
    )
    dirs = [d for d in dirs if d != "."] + ["data"]
    files = [*rels, ".gitignore"]
    subprocess.run(["sync"], check=True)
    return Corpus(repo, files, dirs, big, bulk)


def _write_big(path: Path, mib: int, rng: random.Random) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = bytearray(rng.randbytes(MIB))
    with open(path, "wb") as f:
        for i in range(mib):
            block[:8] = i.to_bytes(8, "little")
            f.write(block)


def build_wide_repo(repo: Path, files: int, env: dict[str, str]) -> None:
    """A repository of `files` small files (about 12 per directory)."""
    rng = random.Random(50)
    _init_repo(repo, env)
    per_dir = 12
    rels = [f"d{i // per_dir // 64:03d}/s{i // per_dir:05d}/f{i:06d}.txt" for i in range(files)]
    _write_files(repo, rels, files * 1024, rng)
    _commit_all(repo, env)


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
    )
    for key in ("GITSESS_SESSION", "GITSESS_DIR", "GIT_DIR", "GIT_WORK_TREE"):
        env.pop(key, None)
    home.mkdir(parents=True, exist_ok=True)
    return env


# ---------------------------------------------------------------------------------- views


@dataclass(frozen=True)
class View:
    """One target's view of the corpus: where to work, and who serves it."""

    target: str
    root: Path
    pid: int | None = None  # the FUSE daemon, None for the native directory

    def peak_kib(self) -> int | None:
        return peak_memory_kib(self.pid) if self.pid is not None else None


def peak_memory_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _is_mounted(path: Path) -> bool:
    return mount.is_mounted(path)


def _wait_mounted(path: Path, proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not _is_mounted(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"fuse-overlayfs did not mount {path}")
        time.sleep(0.01)


def _kill_if(pid: int, marker: str) -> None:
    """SIGKILL `pid` if it still is the process we started (its command line has `marker`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return
    if marker.encode() in cmdline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _force_unmount(path: Path) -> None:
    if _is_mounted(path):
        subprocess.run(["fusermount3", "-uz", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def native_view(lower: Path, scratch: Path) -> Iterator[View]:
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
        _wait_mounted(mnt, proc)
        yield View(OVERLAYFS, mnt, proc.pid)
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
def gitsess_view(lower: Path, scratch: Path) -> Iterator[View]:
    session_dir = Path(tempfile.mkdtemp(prefix="sess-", dir=scratch))
    spec = mount.MountSpec(
        session_id=str(uuid.uuid4()), lower=lower, session_dir=session_dir, persistent=True
    )
    with gitsess_mounted(spec) as pid:
        yield View(GITSESS, spec.target, pid)
    shutil.rmtree(session_dir, ignore_errors=True)


@contextlib.contextmanager
def gitsess_mounted(spec: mount.MountSpec) -> Iterator[int]:
    """Mount a session view; always stop it, and never leave its daemon or mount behind."""
    pid: int | None = None
    try:
        pid = mount.ensure_mounted(spec).daemon_pid
        yield pid
    finally:
        try:
            mount.stop(spec.session_id, spec.target)
        finally:
            if pid is not None:
                _kill_if(pid, "gitsess.overlay.daemon")
            _force_unmount(spec.target)


ViewFactory = Callable[[Path, Path], contextlib.AbstractContextManager[View]]
FACTORIES: dict[str, ViewFactory] = {
    NATIVE: native_view,
    OVERLAYFS: overlayfs_view,
    GITSESS: gitsess_view,
}


# ---------------------------------------------------------------------------------- workloads


@dataclass(frozen=True)
class Env:
    view: View
    corpus: Corpus
    cfg: Config
    scratch: Path  # private to this run, outside every view


@dataclass(frozen=True)
class Prepared:
    action: Step  # the timed part
    cleanup: Step = lambda: None


@dataclass(frozen=True)
class Goal:
    """A target from the issue: gitsess within `factor` of `against`."""

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
    quick: bool = False
    slow: bool = False  # seconds per run: `slow_runs` runs
    goals: tuple[Goal, ...] = ()


def _abs(env: Env, rels: Sequence[str]) -> list[str]:
    root = str(env.view.root)
    return [f"{root}/{r}" for r in rels]


def _run(cmd: Sequence[str], cwd: Path | None = None) -> None:
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def prep_find(env: Env) -> Prepared:
    return Prepared(lambda: _run(["find", str(env.view.root)]))


def prep_lstat(env: Env) -> Prepared:
    paths = _abs(env, env.corpus.paths)

    def action() -> None:
        for p in paths:
            os.lstat(p)

    return Prepared(action)


def prep_read_small(env: Env) -> Prepared:
    paths = _abs(env, env.corpus.files)

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
        buf = bytearray(MIB)
        with open(path, "rb", buffering=0) as f:
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
                block[:8] = i.to_bytes(8, "little")
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


def prep_rm_rf(env: Env) -> Prepared:
    source = env.view.root / env.corpus.bulk
    if env.view.target == NATIVE:
        # Natively the corpus itself must survive: remove a fresh copy of the same tree.
        victim = env.view.root / "bench-bulk-copy"
        _run(["cp", "-a", str(source), str(victim)])
        _run(["sync"])
    else:
        victim = source  # the lower directory itself, in a fresh view
    _run(["find", str(victim)])  # every target starts with the tree in the caches

    def cleanup() -> None:
        if env.view.target == NATIVE:
            shutil.rmtree(victim, ignore_errors=True)

    return Prepared(lambda: _run(["rm", "-rf", str(victim)]), cleanup)


def prep_git_status(env: Env) -> Prepared:
    return Prepared(lambda: _run(["git", "status", "--porcelain"], cwd=env.view.root))


def workloads() -> list[Workload]:
    beat_ovl = (Goal(OVERLAYFS, 1.0),)
    two_native = (Goal(NATIVE, 2.0), *beat_ovl)
    return [
        Workload("find-cold", "find (cold)", prep_find, cold=True, goals=beat_ovl),
        Workload("find-warm", "find (warm)", prep_find, quick=True, goals=beat_ovl),
        Workload("lstat-cold", "lstat every file (cold)", prep_lstat, cold=True, goals=beat_ovl),
        Workload("lstat-warm", "lstat every file (warm)", prep_lstat, quick=True, goals=two_native),
        Workload(
            "read-small-cold",
            "read every small file (cold)",
            prep_read_small,
            cold=True,
            goals=beat_ovl,
        ),
        Workload(
            "read-small-warm",
            "read every small file (warm)",
            prep_read_small,
            quick=True,
            goals=beat_ovl,
        ),
        Workload(
            "seq-read-cold",
            "sequential read, big file (cold)",
            prep_seq_read,
            cold=True,
            goals=beat_ovl,
        ),
        Workload(
            "seq-read-warm",
            "sequential read, big file (warm)",
            prep_seq_read,
            quick=True,
            goals=(Goal(NATIVE, 1.3), *beat_ovl),
        ),
        Workload(
            "seq-write",
            "sequential write + fsync",
            prep_seq_write,
            mutates=True,
            quick=True,
            goals=two_native,
        ),
        Workload(
            "create",
            "create 2,000 small files",
            prep_create,
            mutates=True,
            quick=True,
            slow=True,
            goals=beat_ovl,
        ),
        Workload(
            "rm-rf",
            "rm -rf lower dir (2,000 files)",
            prep_rm_rf,
            mutates=True,
            slow=True,
            goals=(Goal(NATIVE, 3.0), *beat_ovl),
        ),
        Workload(
            "git-status-cold", "git status (cold)", prep_git_status, cold=True, goals=beat_ovl
        ),
        Workload(
            "git-status-warm", "git status (warm)", prep_git_status, quick=True, goals=two_native
        ),
    ]


# ---------------------------------------------------------------------------------- measuring


@dataclass
class Result:
    key: str
    label: str
    times: dict[str, list[float]] = field(default_factory=dict)
    goals: list[str] = field(default_factory=list)
    note: str = ""

    def median(self, target: str) -> float | None:
        t = self.times.get(target)
        return statistics.median(t) if t else None

    def ratio(self, target: str, against: str) -> float | None:
        a, b = self.median(target), self.median(against)
        return a / b if a is not None and b else None


@dataclass
class Memory:
    """Peak resident memory (VmHWM, KiB) of each FUSE daemon, by where it was measured."""

    peaks: dict[str, dict[str, int]] = field(default_factory=dict)

    def record(self, where: str, view: View) -> None:
        kib = view.peak_kib()
        if kib is not None:
            slot = self.peaks.setdefault(where, {})
            slot[view.target] = max(kib, slot.get(view.target, 0))


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


def measure_once(w: Workload, env: Env, profiler: Profiler | None = None) -> float:
    prepared = w.prepare(env)
    try:
        if w.cold:
            drop_caches()
        if profiler is None:
            return timed(prepared.action)
        with profiler.attached(env.view, w.key):
            return timed(prepared.action)
    finally:
        prepared.cleanup()


def rotation(run: int, targets: Sequence[str]) -> list[str]:
    """The order of the targets in run `run`: each goes first in turn, so drift spreads out."""
    k = run % len(targets)
    return [*targets[k:], *targets[:k]]


def run_shared(
    items: Sequence[Workload],
    corpus: Corpus,
    cfg: Config,
    scratch: Path,
    memory: Memory,
    profiler: Profiler | None,
) -> list[Result]:
    """Workloads that leave the tree as they found it: one view per target for all runs."""
    results = [Result(w.key, w.label, goals=[str(g) for g in w.goals]) for w in items]
    with contextlib.ExitStack() as stack:
        views = {t: stack.enter_context(FACTORIES[t](corpus.repo, scratch)) for t in TARGETS}
        for w, res in zip(items, results, strict=True):
            envs = {t: Env(views[t], corpus, cfg, scratch) for t in TARGETS}
            if not w.cold:
                for t in TARGETS:
                    measure_once(w, envs[t])  # warm-up, not counted
            for run in range(cfg.runs):
                for t in rotation(run, TARGETS):
                    res.times.setdefault(t, []).append(measure_once(w, envs[t]))
            progress(res)
            if profiler is not None:
                measure_once(w, envs[GITSESS], profiler)
        for view in views.values():
            memory.record("5,000-file corpus, shared views", view)
    return results


def run_mutating(
    items: Sequence[Workload],
    corpus: Corpus,
    cfg: Config,
    scratch: Path,
    memory: Memory,
    profiler: Profiler | None,
) -> list[Result]:
    """Workloads that change the tree: a fresh view for every run, one view at a time."""
    results = []
    for w in items:
        res = Result(w.key, w.label, goals=[str(g) for g in w.goals])
        runs = cfg.slow_runs if w.slow else cfg.runs
        for run in range(runs + (1 if profiler else 0)):
            for t in rotation(run, TARGETS):
                profiled = run == runs
                if profiled and t != GITSESS:
                    continue
                with FACTORIES[t](corpus.repo, scratch) as view:
                    env = Env(view, corpus, cfg, scratch)
                    took = measure_once(w, env, profiler if profiled else None)
                    memory.record("5,000-file corpus, write workloads", view)
                if not profiled:
                    res.times.setdefault(t, []).append(took)
        progress(res)
        results.append(res)
    return results


def progress(res: Result) -> None:
    parts = [f"{t} {fmt_time(res.median(t))}" for t in TARGETS if res.median(t) is not None]
    console.log(f"{res.label}: " + ", ".join(parts))


# ---------------------------------------------------------------------------------- sessions


def cli_has(command: str, env: dict[str, str]) -> bool:
    done = subprocess.run(
        [GITSESS_CLI, command, "--help"], env=env, capture_output=True, check=False
    )
    return done.returncode == 0


@dataclass(frozen=True)
class Session:
    name: str
    id: str
    worktree: Path


def gitsess_new(repo: Path, name: str, env: dict[str, str], *extra: str) -> Session:
    done = subprocess.run(
        [GITSESS_CLI, "new", name, "--json", *extra],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gitsess new {name} failed: {done.stderr.strip()}")
    data = json.loads(done.stdout)
    return Session(name, str(data["id"]), Path(str(data["worktree"])))


def gitsess_rm(repo: Path, name: str, env: dict[str, str]) -> None:
    subprocess.run(
        [GITSESS_CLI, "rm", name, "--force"], cwd=repo, env=env, capture_output=True, check=False
    )


def session_spec(repo: Path, session: Session) -> mount.MountSpec:
    """How `gitsess` itself mounts the session (the state dir is hidden from the view)."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").strip())
    state = common / "gitsess"
    hidden: tuple[str, ...] = ()
    with contextlib.suppress(ValueError):
        hidden = (str(state.resolve().relative_to(session.worktree.resolve())),)
    return mount.MountSpec(
        session_id=session.id,
        lower=session.worktree,
        session_dir=state / "sessions" / session.id,
        hidden=hidden,
        persistent=True,
    )


@dataclass
class Creation:
    repo: str
    files: int
    gitsess: list[float] = field(default_factory=list)
    worktree_add: list[float] = field(default_factory=list)
    via: str = ""

    def medians(self) -> tuple[float, float]:
        return statistics.median(self.gitsess), statistics.median(self.worktree_add)


def time_session_start(repo: Path, name: str, env: dict[str, str], memory: Memory) -> float:
    """`gitsess new` + first mount, until the view answers; stopped and removed afterwards."""
    session: Session | None = None
    spec: mount.MountSpec | None = None
    t0 = time.perf_counter()
    try:
        session = gitsess_new(repo, name, env)
        spec = session_spec(repo, session)
        with gitsess_mounted(spec) as pid:
            next(spec.target.iterdir(), None)
            took = time.perf_counter() - t0
            memory.record(f"session start, {repo.name}", View(GITSESS, spec.target, pid))
        return took
    finally:
        gitsess_rm(repo, name, env)


def time_worktree_add(repo: Path, path: Path, branch: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    try:
        git(repo, "worktree", "add", "-q", "-b", branch, str(path), env=env)
        return time.perf_counter() - t0
    finally:
        git(repo, "worktree", "remove", "--force", str(path), env=env)
        git(repo, "branch", "-q", "-D", branch, env=env)


def run_creation(
    repos: Sequence[tuple[Path, int]],
    cfg: Config,
    scratch: Path,
    env: dict[str, str],
    memory: Memory,
) -> list[Creation]:
    results = []
    for repo, files in repos:
        c = Creation(repo.name, files, via="gitsess new + mount.ensure_mounted")
        for i in range(cfg.creation_runs):
            c.gitsess.append(time_session_start(repo, f"bench-{i}", env, memory))
            wt = scratch / f"wt-{repo.name}-{i}"
            c.worktree_add.append(time_worktree_add(repo, wt, f"bench-wt-{i}", env))
        g, w = c.medians()
        console.log(f"start on {files:,} files: gitsess {fmt_time(g)}, worktree {fmt_time(w)}")
        results.append(c)
    return results


def run_wide_memory(repo: Path, files: int, scratch: Path, memory: Memory) -> None:
    """Peak memory of both daemons after walking, stat'ing, reading and `git status` of a big
    repository through them."""
    rels = [
        str(p.relative_to(repo)) for p in repo.rglob("*") if ".git" not in p.parts and p.is_file()
    ]
    for target in (OVERLAYFS, GITSESS):
        with FACTORIES[target](repo, scratch) as view:
            _run(["find", str(view.root)])
            for rel in rels:
                with open(view.root / rel, "rb") as f:
                    f.read()
            _run(["git", "status", "--porcelain"], cwd=view.root)
            memory.record(f"{files:,}-file repo: find, read all, git status", view)


# ---------------------------------------------------------------------------------- diff / apply


@dataclass
class ApplyResult:
    diff: Result
    commit: Result
    available: bool
    note: str = ""


def _change_files(root: Path, rels: Sequence[str]) -> None:
    for rel in rels:
        with open(root / rel, "ab") as f:
            f.write(b"# changed by the benchmark\n")


def _apply_native_like(
    target: str, repo: Path, rels: Sequence[str], run: int, scratch: Path, env: dict[str, str]
) -> tuple[float, float]:
    """git diff and git commit -a in a fresh worktree, directly or through fuse-overlayfs."""
    wt, branch = scratch / f"apply-{target}-{run}", f"bench-apply-{target}-{run}"
    git(repo, "worktree", "add", "-q", "-b", branch, str(wt), env=env)
    try:
        with FACTORIES[target](wt, scratch) as view:
            _change_files(view.root, rels)
            t_diff = timed(lambda: _run_env(["git", "diff"], view.root, env))
            t_commit = timed(lambda: _run_env(["git", "commit", "-qam", "bench"], view.root, env))
        return t_diff, t_commit
    finally:
        git(repo, "worktree", "remove", "--force", str(wt), env=env)
        git(repo, "branch", "-q", "-D", branch, env=env)


def _run_env(cmd: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def _apply_gitsess(
    repo: Path, rels: Sequence[str], run: int, env: dict[str, str], memory: Memory
) -> tuple[float, float]:
    """gitsess diff and apply --commit of a session (on its own worktree) after a mounted edit."""
    name = f"bench-apply-{run}"
    session = gitsess_new(repo, name, env, "--worktree")
    try:
        spec = session_spec(repo, session)
        with gitsess_mounted(spec) as pid:
            _change_files(spec.target, rels)
            memory.record("1,000 changed files, edit", View(GITSESS, spec.target, pid))
        t_diff = timed(lambda: _run_env([GITSESS_CLI, "diff", name], repo, env))
        t_commit = timed(
            lambda: _run_env([GITSESS_CLI, "apply", name, "--commit", "-m", "bench"], repo, env)
        )
        return t_diff, t_commit
    finally:
        gitsess_rm(repo, name, env)


def run_apply(
    corpus: Corpus, cfg: Config, scratch: Path, env: dict[str, str], memory: Memory
) -> ApplyResult:
    n = cfg.changed_files
    diff = Result("diff", f"diff of {n:,} changed files")
    commit = Result("apply-commit", f"apply --commit of {n:,} changed files")
    if not (cli_has("diff", env) and cli_has("apply", env)):
        note = "not yet available: the gitsess CLI has no `diff`/`apply` command"
        return ApplyResult(diff, commit, False, note)
    rels = [f for f in corpus.files if f.startswith("src/")][:n]
    for run in range(cfg.runs):
        for t in rotation(run, TARGETS):
            if t == GITSESS:
                d, c = _apply_gitsess(corpus.repo, rels, run, env, memory)
            else:
                d, c = _apply_native_like(t, corpus.repo, rels, run, scratch, env)
            diff.times.setdefault(t, []).append(d)
            commit.times.setdefault(t, []).append(c)
    progress(diff)
    progress(commit)
    note = "native/fuse-overlayfs: git diff, git commit -a; gitsess: gitsess diff, apply --commit"
    return ApplyResult(diff, commit, True, note)


# ---------------------------------------------------------------------------------- profiling


class Profiler:
    """py-spy attached to the gitsess daemon for one extra (uncounted) run of each workload."""

    def __init__(self, outdir: Path, py_spy: str) -> None:
        self.outdir = outdir
        self.py_spy = py_spy
        outdir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def attached(self, view: View, key: str) -> Iterator[None]:
        if view.pid is None:
            yield
            return
        path = self.outdir / f"{key}.txt"
        proc = subprocess.Popen(
            [self.py_spy, "record", "--pid", str(view.pid), "--rate", "400", "--format", "raw",
             "--native", "--nonblocking", "--output", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)  # let it attach
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def summarize_profile(path: Path, top: int = 12) -> list[tuple[str, float, float]]:
    """(function, self share, inclusive share) from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            incl[frame] += count
    if not total:
        return []
    return [(f, n / total, incl[f] / total) for f, n in own.most_common(top)]


# ---------------------------------------------------------------------------------- output


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def goal_met(res: Result) -> bool | None:
    checks = []
    for goal in res.goals:
        _, factor_text, against = goal.split()
        r = res.ratio(GITSESS, against)
        if r is None:
            return None
        checks.append(r <= float(factor_text.rstrip("x")))
    return all(checks) if checks else None


def results_table(results: Sequence[Result]) -> Table:
    t = Table(title="Median wall time (lower is better)")
    t.add_column("workload")
    for target in TARGETS:
        t.add_column(target, justify="right")
    t.add_column("gitsess / native", justify="right")
    t.add_column("gitsess / fuse-overlayfs", justify="right")
    t.add_column("goal (issue 8)")
    for res in results:
        met = goal_met(res)
        mark = "" if met is None else (" [green]met[/]" if met else " [red]missed[/]")
        t.add_row(
            res.label,
            *[fmt_time(res.median(x)) for x in TARGETS],
            fmt_ratio(res.ratio(GITSESS, NATIVE)),
            fmt_ratio(res.ratio(GITSESS, OVERLAYFS)),
            ", ".join(res.goals) + mark if res.goals else res.note,
        )
    return t


def creation_table(items: Sequence[Creation]) -> Table:
    t = Table(title="Session creation + first mount vs git worktree add (median)")
    t.add_column("repository")
    t.add_column("gitsess new + mount", justify="right")
    t.add_column("git worktree add", justify="right")
    for c in items:
        g, w = c.medians()
        t.add_row(f"{c.files:,} files", fmt_time(g), fmt_time(w))
    return t


def memory_table(memory: Memory) -> Table:
    t = Table(title="FUSE daemon peak memory (VmHWM)")
    t.add_column("measured during")
    t.add_column(OVERLAYFS, justify="right")
    t.add_column(GITSESS, justify="right")
    for where, peaks in memory.peaks.items():
        t.add_row(where, *[fmt_kib(peaks.get(x)) for x in (OVERLAYFS, GITSESS)])
    return t


def fmt_kib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    fs = subprocess.run(
        ["df", "--output=fstype", tempfile.gettempdir()],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    mem_kib = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    ovl = subprocess.run(
        ["fuse-overlayfs", "--version"], capture_output=True, text=True, check=False
    )
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "fs": fs[-1] if fs else "unknown",
        "python": platform.python_version(),
        "git": git(Path.cwd(), "--version").strip(),
        "fuse-overlayfs": ovl.stdout.splitlines()[-1] if ovl.stdout else "unknown",
    }


@dataclass
class Report:
    machine: dict[str, str]
    config: Config
    results: list[Result]
    creation: list[Creation]
    apply: ApplyResult | None
    memory: Memory
    notes: list[str]
    seconds: float

    def to_json(self) -> dict[str, object]:
        rows = [*self.results]
        if self.apply is not None and self.apply.available:
            rows += [self.apply.diff, self.apply.commit]
        return {
            "machine": self.machine,
            "config": asdict(self.config),
            "workloads": [
                {
                    "key": r.key,
                    "label": r.label,
                    "times": r.times,
                    "median": {t: r.median(t) for t in TARGETS if r.median(t) is not None},
                    "ratio_to_native": r.ratio(GITSESS, NATIVE),
                    "ratio_to_fuse_overlayfs": r.ratio(GITSESS, OVERLAYFS),
                    "goals": r.goals,
                    "goal_met": goal_met(r),
                }
                for r in rows
            ],
            "session_start": [
                {
                    "files": c.files,
                    "gitsess": c.gitsess,
                    "git_worktree_add": c.worktree_add,
                    "median": dict(zip(("gitsess", "git_worktree_add"), c.medians(), strict=True)),
                    "via": c.via,
                }
                for c in self.creation
            ],
            "diff_apply": None
            if self.apply is None
            else {"available": self.apply.available, "note": self.apply.note},
            "peak_memory_kib": self.memory.peaks,
            "notes": self.notes,
            "seconds": self.seconds,
        }


def render(report: Report) -> None:
    m = report.machine
    out.print(
        f"[bold]gitsess benchmark[/] ({'quick' if report.config.quick else 'full'}, "
        f"median of {report.config.runs} runs, {report.seconds:.0f} s)\n"
        f"{m['cpu']}, {m['cores']} cores, {m['memory']}, Linux {m['kernel']}, {m['fs']}, "
        f"{m['fuse-overlayfs']}"
    )
    rows = [*report.results]
    if report.apply is not None and report.apply.available:
        rows += [report.apply.diff, report.apply.commit]
    out.print(results_table(rows))
    if report.creation:
        out.print(creation_table(report.creation))
    out.print(memory_table(report.memory))
    for note in report.notes:
        out.print(f"note: {note}")


# ---------------------------------------------------------------------------------- main


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a subset, under a minute")
    p.add_argument("--runs", type=int, help="runs per figure (default 5, quick 3)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--only", action="append", default=[], metavar="KEY", help="only this workload")
    p.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the gitsess daemon")
    p.add_argument("--keep", action="store_true", help="keep the temporary corpus directory")
    return p.parse_args(argv)


def select(cfg: Config, only: Sequence[str], cold_ok: bool) -> list[Workload]:
    chosen = [w for w in workloads() if (w.quick or not cfg.quick) and (w.cold <= cold_ok)]
    if only:
        chosen = [w for w in workloads() if w.key in only and (w.cold <= cold_ok)]
    return chosen


def preflight() -> list[str]:
    missing = [tool for tool in ("fuse-overlayfs", "fusermount3", "git") if not shutil.which(tool)]
    if missing:
        raise SystemExit(f"bench: missing {', '.join(missing)}")
    if not Path("/dev/fuse").exists():
        raise SystemExit("bench: /dev/fuse is missing")
    return []


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    cfg = Config.make(args.quick, args.runs)
    notes = preflight()
    cold_ok = can_drop_caches()
    if not cold_ok:
        notes.append("cold workloads skipped: dropping the page cache needs root")
    profiler = None
    if args.profile is not None:
        py_spy = shutil.which("py-spy") or str(VENV_BIN / "py-spy")
        if not Path(py_spy).exists():
            raise SystemExit("bench: --profile needs py-spy (pip install py-spy)")
        profiler = Profiler(args.profile, py_spy)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="gitsess-bench-"))
    try:
        report = run_all(cfg, tmp, select(cfg, args.only, cold_ok), notes, profiler, args.only)
        report.seconds = time.perf_counter() - started
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    render(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if profiler is not None:
        print_profiles(profiler.outdir)
    return 0


def print_profiles(outdir: Path) -> None:
    for path in sorted(outdir.glob("*.txt")):
        t = Table(title=f"gitsess daemon profile: {path.stem} (py-spy, active samples)")
        t.add_column("function (self)")
        t.add_column("self", justify="right")
        t.add_column("inclusive", justify="right")
        for name, own, incl in summarize_profile(path):
            t.add_row(name, f"{own:.0%}", f"{incl:.0%}")
        out.print(t)


def run_all(
    cfg: Config,
    tmp: Path,
    chosen: Sequence[Workload],
    notes: list[str],
    profiler: Profiler | None,
    only: Sequence[str],
) -> Report:
    env = isolated_env(tmp / "home")
    scratch = tmp / "scratch"
    scratch.mkdir()
    console.log(f"building the corpus in {tmp}")
    corpus = build_corpus(tmp / "corpus", cfg, env)
    memory = Memory()
    shared = [w for w in chosen if not w.mutates]
    results = run_shared(shared, corpus, cfg, scratch, memory, profiler) if shared else []
    mutating = [w for w in chosen if w.mutates]
    results += run_mutating(mutating, corpus, cfg, scratch, memory, profiler) if mutating else []
    order = [w.key for w in workloads()]
    results.sort(key=lambda r: order.index(r.key))
    creation: list[Creation] = []
    apply: ApplyResult | None = None
    if not only or "session-start" in only:
        repos: list[tuple[Path, int]] = [(corpus.repo, cfg.small_files)]
        if not cfg.quick:
            console.log(f"building the {cfg.wide_files:,}-file repository")
            wide = tmp / "wide"
            build_wide_repo(wide, cfg.wide_files, env)
            repos.append((wide, cfg.wide_files))
            run_wide_memory(wide, cfg.wide_files, scratch, memory)
        creation = run_creation(repos, cfg, scratch, env, memory)
    if not cfg.quick and (not only or "apply" in only):
        apply = run_apply(corpus, cfg, scratch, env, memory)
        if not apply.available:
            notes.append(f"diff and apply --commit: {apply.note}")
    return Report(machine(), cfg, results, creation, apply, memory, notes, 0.0)


if __name__ == "__main__":
    sys.exit(main())
