"""`gitsess doctor`: what this machine and directory offer gitsess, one verdict per check."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gitsess.errors import GitsessError
from gitsess.git.repo import discover
from gitsess.libc import LIBC
from gitsess.services import sessions

Verdict = Literal["ok", "warn", "fail"]

# From <sched.h> and <sys/mount.h>.
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

LIBFUSE_MIN = (3, 2)  # the oldest libfuse3 that pyfuse3 supports


@dataclass(frozen=True)
class Check:
    name: str
    verdict: Verdict
    detail: str


def run_checks() -> list[Check]:
    checks: list[Callable[[], Check | list[Check]]] = [
        check_dev_fuse,
        check_fusermount,
        check_libfuse,
        check_pyfuse3,
        check_read_ahead,
        check_user_namespaces,
        check_mount_namespaces,
        check_in_place,
        check_allow_other,
        check_repository,
    ]
    results: list[Check] = []
    for check in checks:
        result = check()
        results.extend(result if isinstance(result, list) else [result])
    return results


def check_dev_fuse(path: Path = Path("/dev/fuse")) -> Check:
    name = str(path)
    try:
        mode = path.stat().st_mode
    except OSError as e:
        return Check(
            name, "fail", f"missing ({e.strerror}): load the fuse module or pass the device"
        )
    if not stat.S_ISCHR(mode):
        return Check(name, "fail", "exists but is not a character device")
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as e:
        # libfuse opens it itself before it asks fusermount3, and gives up when it cannot.
        return Check(
            name,
            "fail",
            f"cannot open it read-write ({e.strerror}), so no mount without root. Fix (as"
            f" root): chmod 0666 {path} (stock Debian's mode; udev sets it at boot)",
        )
    return Check(name, "ok", "character device, opens read-write")


def check_fusermount() -> Check:
    found = shutil.which("fusermount3")
    if found is None:
        return Check("fusermount3", "fail", "not on PATH: apt-get install fuse3")
    return Check("fusermount3", "ok", found)


def check_libfuse() -> Check:
    name = "libfuse"
    library = ctypes.util.find_library("fuse3")
    if library is None:
        return Check(name, "fail", "libfuse3 not found: apt-get install fuse3")
    try:
        fuse = ctypes.CDLL(library)
        fuse.fuse_pkgversion.restype = ctypes.c_char_p
        version = fuse.fuse_pkgversion().decode()
    except (OSError, AttributeError) as e:
        return Check(name, "fail", f"{library} is not usable: {e}")
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if numbers < LIBFUSE_MIN:
        wanted = ".".join(map(str, LIBFUSE_MIN))
        return Check(name, "fail", f"{library} is version {version}; gitsess needs {wanted}+")
    return Check(name, "ok", f"{library} version {version}")


def check_pyfuse3() -> Check:
    try:
        import pyfuse3

        from gitsess.overlay import pyfuse3_build
    except ImportError as e:
        return Check("pyfuse3", "fail", f"cannot import it: {e}")
    problem = pyfuse3_build.problem()
    if problem is not None:
        return Check("pyfuse3", "fail", problem)
    series = f"the {pyfuse3_build.PATCHES} patches of patches/pyfuse3/"
    return Check("pyfuse3", "ok", f"version {pyfuse3.__version__}, gitsess's build ({series})")


def check_read_ahead(sysfs: Path = Path("/sys/class/bdi")) -> Check:
    name = "read-ahead"
    from gitsess.overlay import pyfuse3_build

    if pyfuse3_build.problem() is not None:
        return Check(name, "warn", "needs gitsess's build of pyfuse3 (see the pyfuse3 check)")
    from gitsess.overlay.daemon import READ_AHEAD_KB

    slower = "a sequential read costs a request per 128 KiB, not per 1 MiB"
    if os.geteuid() != 0:
        return Check(name, "warn", f"not root: views keep the kernel's 128 KiB; {slower}")
    try:
        read_only = bool(os.statvfs(sysfs).f_flag & os.ST_RDONLY)
    except OSError as e:
        return Check(name, "warn", f"{sysfs}: {e.strerror}; views keep 128 KiB; {slower}")
    if read_only:
        return Check(name, "warn", f"{sysfs} is read-only: views keep 128 KiB; {slower}")
    return Check(name, "ok", f"views read ahead {READ_AHEAD_KB} KiB (the kernel's default: 128)")


def check_user_namespaces() -> Check:
    name = "user namespaces"
    failure = try_in_child(CLONE_NEWUSER, remount_private=False)
    if failure is None:
        return Check(name, "ok", "a child process could create one")
    if os.geteuid() == 0:
        return Check(name, "warn", f"unavailable ({failure}); not needed as root")
    return Check(name, "fail", f"unavailable ({failure}); needed to mount without root")


def check_mount_namespaces() -> Check:
    # Unprivileged processes get a mount namespace only inside their own user namespace.
    flags = CLONE_NEWNS if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNS
    failure = try_in_child(flags, remount_private=True)
    if failure is None:
        return Check("mount namespaces", "ok", "a child process could create one and mount in it")
    return Check("mount namespaces", "fail", f"unavailable ({failure}); in-place views need them")


def check_in_place() -> Check:
    """What `gitsess run` does, tried on directories of a temporary one: the namespaces, the
    binds, the read-only state dir, the run's own /proc, the locking user namespace."""
    import tempfile

    from gitsess.runtime import inplace

    name = "runs in place"
    with tempfile.TemporaryDirectory(prefix="gitsess-doctor-") as top:
        worktree, view = Path(top, "worktree"), Path(top, "view")
        for d in (worktree, view):
            (d / ".git" / "gitsess").mkdir(parents=True)
        placement = inplace.Placement(worktree, view, False, worktree / ".git" / "gitsess")
        try:
            proc = inplace.spawn(["true"], placement, cwd=worktree, env=dict(os.environ))
        except (GitsessError, OSError) as e:
            return Check(name, "fail", str(e))
        code = proc.wait()
    if code != 0:
        return Check(name, "fail", f"a trial run ended with {code}")
    return Check(name, "ok", "a trial command ran sealed in a view (namespaces, /proc, binds)")


FUSE_CONF = Path("/etc/fuse.conf")


def check_allow_other(conf: Path = FUSE_CONF) -> Check:
    name = "mount --allow-other"
    if os.geteuid() == 0:
        return Check(name, "ok", "root may always")
    from gitsess.runtime.mount import allow_other_permitted

    if allow_other_permitted(conf):
        return Check(name, "ok", f"user_allow_other is set in {conf}")
    return Check(
        name,
        "warn",
        f"user_allow_other is not set in {conf}; only needed for --allow-other. Fix (as root):"
        f" echo user_allow_other >> {conf}",
    )


def try_in_child(flags: int, *, remount_private: bool) -> str | None:
    """Try `unshare(flags)` (and a private remount of /) in a forked child: whatever it gets,
    this process stays where it is. None on success, else what failed."""
    # Looked up before forking: the child of a threaded parent must not take the loader's
    # locks (dlsym).
    unshare, mount = LIBC.unshare, LIBC.mount
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into the caller's code
        os.close(read_end)
        failed = ""
        if unshare(flags) != 0:
            failed = "unshare: " + os.strerror(ctypes.get_errno())
        elif remount_private and mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            failed = "mount: " + os.strerror(ctypes.get_errno())
        os.write(write_end, failed.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return f"the test process died (wait status {status})"
    return report or None


def check_repository() -> list[Check]:
    try:
        ctx = discover()
    except GitsessError as e:
        return [Check("git repository", "warn", f"{e}; run gitsess inside a git worktree")]
    where = f"worktree {ctx.worktree}" if ctx.worktree else "bare: sessions need --worktree"
    found = [Check("git repository", "ok", f"{ctx.common_dir} ({where})")]
    try:
        problems = sessions.registry_problems(ctx)
        count = len(sessions.list_sessions(ctx))
    except GitsessError as e:
        return [*found, Check("session registry", "fail", str(e))]
    if problems:
        detail = f"{ctx.registry_path} is damaged ({problems[0]}); `gitsess doctor --repair`"
        return [*found, Check("session registry", "fail", detail)]
    detail = f"{count} session(s) in {ctx.registry_path}" if count else "no sessions yet"
    return [*found, Check("session registry", "ok", detail)]
