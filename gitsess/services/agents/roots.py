"""Isolation roots on disk: creation, the running lock, seeding, token refresh, purging.

A root is `<state-dir>/homes/<isolation-uuid>/` (0700). Seeds are symlinks to shared originals;
nothing here ever writes through a seed, and only a refresh writes an original (atomically).

A CLI refreshes a credential by renaming a temporary file over it, which turns the seed's link
into a private file. A sweep looks at every linked seed of every row of the repository and, for
each original with replacements, takes the newest: if it is newer than the original and
differs, it is written over the original's real path (temp file, fsync, rename; mode kept), so
a dotfile that is itself a symlink keeps its link; an older replacement is only linked again
(the original won). Then every replaced path is linked again, only if the file is still the one
looked at, so a refresh racing the sweep is taken by the next one. Sweeps run at `prepare`, at
`finish`, before a purge (a token refreshed in a root about to go is not lost) and from the
refresher. Seeds are recorded on the row as `linked`,
`missing` or `private` (the agent's own file there, never clobbered).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import shutil
import stat
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gitsess import durable
from gitsess.errors import GitsessError
from gitsess.store.agent_rows import Participant, Seed
from gitsess.store.db import private_dir


def homes_dir(state_dir: Path) -> Path:
    return state_dir / "homes"


def root_of(state_dir: Path, isolation_uuid: str) -> Path:
    return homes_dir(state_dir) / isolation_uuid


def create_root(root: Path) -> None:
    """Make a new root; one that already exists is never taken over (roots are never shared)."""
    try:
        private_dir(root.parent)
        root.mkdir(mode=0o700)
    except FileExistsError:
        raise GitsessError(
            f"isolation root {root} already exists; it belongs to another participant"
        ) from None
    except OSError as e:
        raise GitsessError(f"cannot create {root}: {e.strerror}") from e


def try_lock(root: Path) -> int | None:
    """An fd holding the root's lock, None when a running participant holds it.

    The lock is what "running" means: the kernel drops it when its holder dies, so a crash
    never leaves a role stuck, and a reused pid is never mistaken for the holder.
    """
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def seed(root: Path, source: Path, patterns: Iterable[str]) -> list[Seed]:
    """Link each original under `source` that `patterns` name to the same path in `root`.

    Missing originals are recorded, not linked. A file the agent made itself at a seed's path
    is kept ("private"): seeding never destroys an agent's state.
    """
    seeds: list[Seed] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern, root_dir=source, include_hidden=True))
            if not matches:
                seeds.append(Seed(pattern, str(source / pattern), "missing"))
        else:
            matches = [pattern]
        for rel in matches:
            link = root / rel
            if _below_link(root, link):
                continue  # an enclosing seed already shares it
            seeds.append(_link(link, rel, source / rel))
    return seeds


def _below_link(root: Path, path: Path) -> bool:
    return any(p.is_symlink() for p in path.parents if p != root and p.is_relative_to(root))


def _link(link: Path, rel: str, target: Path) -> Seed:
    ours = link.is_symlink() and os.readlink(link) == str(target)
    if not os.path.lexists(target):
        if ours:
            # The original went away (a logout): the agent must not write one through us.
            link.unlink()
        return Seed(rel, str(target), "missing")
    if ours:
        return Seed(rel, str(target), "linked")
    if os.path.lexists(link) and not link.is_symlink():
        return Seed(rel, str(target), "private")
    private_dir(link.parent)
    _replace_with_link(link, target)
    return Seed(rel, str(target), "linked")


def _replace_with_link(path: Path, target: Path | str) -> None:
    """Atomically: the agent never sees the path missing."""
    tmp = path.with_name(f".{path.name}.gitsess-{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink()
        raise


@dataclass(frozen=True)
class Refresh:
    """A seed that agents replaced with their own file, and what the sweep did about it."""

    target: str
    copied_from: Path | None  # the agent's file that became the original; None: it was older
    relinked: tuple[Path, ...]


def sweep(participants: Iterable[Participant], state_dir: Path) -> list[Refresh]:
    """Find linked seeds that became regular files (a CLI refreshed a token by writing a temp
    file and renaming it over the link), copy the newest back over the original, and link every
    root to the original again, so that all agents share the refreshed file."""
    replaced: dict[str, list[tuple[Path, os.stat_result]]] = {}
    for p in participants:
        root = root_of(state_dir, p.isolation_uuid)
        for s in p.seeded:
            if s.status != "linked":
                continue
            path = root / s.path
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                replaced.setdefault(s.target, []).append((path, st))
    done = []
    for target, copies in sorted(replaced.items()):
        newest, newest_st = max(copies, key=lambda c: c[1].st_mtime_ns)
        original = Path(os.path.realpath(target))
        try:
            original_st: os.stat_result | None = original.stat()
        except FileNotFoundError:
            original_st = None
        if original_st is not None and not stat.S_ISREG(original_st.st_mode):
            continue
        copied = None
        if original_st is None or newest_st.st_mtime_ns > original_st.st_mtime_ns:
            data = newest.read_bytes()
            if original_st is None or data != original.read_bytes():
                mode = (original_st or newest_st).st_mode & 0o7777
                _write_atomically(original, data, mode)
                copied = newest
        relinked = tuple(
            path for path, st in copies if _relink_if_unchanged(path, st, Path(target))
        )
        done.append(Refresh(target, copied, relinked))
    return done


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    """Readers see the old or the new file."""
    with durable.write_aside(path, mode, durable=True) as f:
        f.write(data)


def _relink_if_unchanged(path: Path, seen: os.stat_result, target: Path) -> bool:
    """Link `path` again unless the agent replaced it once more since we looked (the next sweep
    takes that newer file)."""
    try:
        now = path.lstat()
    except FileNotFoundError:
        return False
    if (now.st_ino, now.st_mtime_ns) != (seen.st_ino, seen.st_mtime_ns):
        return False
    _replace_with_link(path, target)
    return True


def purge(root: Path) -> None:
    """Remove a root. Symlinks are removed, never followed: the originals stay as they are."""
    try:
        shutil.rmtree(root)
    except FileNotFoundError:
        return
    except PermissionError:
        # Tools leave read-only directories behind (Go's module cache does); their entries can
        # only go once the directories are writable again.
        _make_dirs_writable(root)
        shutil.rmtree(root)


def _make_dirs_writable(root: Path) -> None:
    root.chmod(0o700)
    for dirpath, dirnames, _ in os.walk(root):
        # Top-down: each directory is fixed before the walk enters it.
        for name in dirnames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o700 != 0o700:
                os.chmod(path, st.st_mode | 0o700)
