"""System calls on worktree paths longer than one call takes (PATH_MAX: 4,096 bytes, the NUL
included).

A client deep inside a view names its files relative to a directory there (its current one, a
descriptor's), as it would natively, where the kernel walks from that directory and a tree may
be any depth. The daemon names the same file by the worktree's absolute path and the path
below it, which can be too long for one call when the client's was not: natively that file
works, so it must in the view. Such a path is walked here as the kernel would walk it: the
directories on its way are opened a stretch at a time, each relative to the last, and the call
gets the rest of the path below the last one's descriptor, as `/proc/self/fd/N/rest`, which
every call takes (the xattr calls and `inotify_add_watch` have no `dir_fd`). Paths that fit are
used as they are, at the cost of a length check.

Standard library only: the lower watch's process imports it too.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

PATH_MAX = 4096
# Room for the rest of a path below a descriptor, named through /proc.
_BELOW_FD = PATH_MAX - 1 - len(b"/proc/self/fd/2147483647/")


def call(
    fn: Callable[Concatenate[bytes, P], T], path: bytes, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(path, *args, **kwargs)`, with `path` reached a stretch at a time if it is too long
    for one call."""
    if len(path) < PATH_MAX:
        return fn(path, *args, **kwargs)
    fd, rest = _walk(path)
    try:
        return fn(b"/proc/self/fd/%d/%s" % (fd, rest), *args, **kwargs)
    finally:
        os.close(fd)


def lstat(path: bytes) -> os.stat_result:
    """`os.lstat(path)`, as `call` would make it: the length test inline, since the daemon
    makes one for every name it serves, and the generic call cost a third more than the
    `lstat` itself."""
    if len(path) < PATH_MAX:
        return os.lstat(path)
    return call(os.lstat, path)


def entries(path: bytes) -> list[tuple[bytes, bool]]:
    """(name, is it a directory) for every entry of the directory at `path`: read in full
    within the call, since an entry of unknown type is lstat'd by its path."""
    return call(_entries, path)


def _entries(path: bytes) -> list[tuple[bytes, bool]]:
    with os.scandir(path) as it:
        return [(de.name, de.is_dir(follow_symlinks=False)) for de in it]


def _walk(path: bytes) -> tuple[int, bytes]:
    """A descriptor of a directory on the way to `path`, and the rest of `path` below it, short
    enough for one call through /proc. Errors are those of the walk (ENOENT, ENOTDIR...), as
    a call on the whole path would give them."""
    fd: int | None = None
    rest = path
    try:
        while fd is None or len(rest) > _BELOW_FD:
            room = PATH_MAX - 1 if fd is None else _BELOW_FD
            cut = rest.rfind(b"/", 1, room + 1)
            if cut < 0:
                raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
            flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
            below = os.open(rest[:cut], flags, dir_fd=fd)
            if fd is not None:
                os.close(fd)
            fd, rest = below, rest[cut + 1 :]
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return fd, rest
