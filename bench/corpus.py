"""The corpus: the git repositories the benchmark builds in its temporary directory, and the
isolated environment git and gitsess run in there."""

from __future__ import annotations

import functools
import os
import random
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.config import MIB, Config

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
