"""gitsess run by an ordinary user made with `useradd`, from a root test run.

The user gets a directory of its own (a temporary one, 0755 up to it, so its daemons and mounts
can reach it) with a virtualenv of a Python it can execute: this one's may live where only root
goes (pyenv under /root). The virtualenv finds gitsess and its libraries where they are when
the user can read them, else in copies made for it.

Where /dev/fuse is 0600 (as in some containers; libfuse then cannot mount as a user even with a
setuid fusermount3), the user's commands run in a mount namespace of their own where a 0666
node of the same device is bound over it, as on a stock Debian machine: nothing of this
machine's own is changed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

USER = "gitsess-user"
# Set by scripts/test.sh for its job of these tests: there a skip would hide that none ran.
REQUIRED = "GITSESS_NONROOT_REQUIRED"
CHECKOUT = Path(__file__).resolve().parent.parent
LIBS = ("gitsess", "pyfuse3", "apsw", "pygit2", "trio", "click", "rich", "watchfiles")


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    home: Path
    python: str
    namespace: int | None = None  # the pid of the process holding the user's mount namespace

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(self.home),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "User",
            "GIT_AUTHOR_EMAIL": "user@example.com",
            "GIT_COMMITTER_NAME": "User",
            "GIT_COMMITTER_EMAIL": "user@example.com",
            "LANG": "C.UTF-8",
            **(extra or {}),
        }

    def run(
        self,
        args: list[str],
        cwd: Path,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        become = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        enter = (
            []
            if self.namespace is None
            else ["nsenter", "-t", str(self.namespace), "-m", f"--wd={cwd}"]
        )
        return subprocess.run(
            [*enter, *become, "--", *args],
            cwd=cwd,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def gitsess(self, cwd: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run([self.python, "-m", "gitsess", *args], cwd, **kw)  # type: ignore[arg-type]

    def sh(self, cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
        return self.run(["sh", "-c", script], cwd)


def _skip(reason: str) -> NoReturn:
    if os.environ.get(REQUIRED):
        pytest.fail(f"{reason} ({REQUIRED} is set)")
    pytest.skip(reason)


def ensure_user() -> tuple[int, int]:
    """The second user, made once (idempotent; concurrent test workers may race to make it)."""
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        if shutil.which("useradd") is None:
            _skip("useradd is not available")
        subprocess.run(["useradd", "--no-create-home", USER], capture_output=True, check=False)
        entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def _pythons() -> Iterator[str]:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (
        getattr(sys, "_base_executable", sys.executable),
        shutil.which(f"python{version}", path="/usr/local/bin:/usr/bin:/bin"),
        f"/usr/bin/python{version}",
    ):
        if candidate:
            yield candidate


def _try(uid: int, gid: int, args: list[str]) -> bool:
    try:
        done = subprocess.run(
            args, user=uid, group=gid, extra_groups=[], capture_output=True, check=False, cwd="/"
        )
    except OSError:  # not executable for the user
        return False
    return done.returncode == 0


@contextmanager
def user_env() -> Iterator[User]:
    """The user, with its own home and Python; removed afterwards."""
    if os.geteuid() != 0:
        _skip("needs root to act as a second user")
    uid, gid = ensure_user()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    check = f"import sys; assert sys.version_info[:2] == ({version.replace('.', ', ')})"
    base = next((p for p in _pythons() if _try(uid, gid, [p, "-c", check])), None)
    if base is None:
        _skip(f"no Python {version} the user {USER} can execute")
    top = Path(tempfile.mkdtemp(prefix="gitsess-user-", dir="/tmp"))
    try:
        top.chmod(0o755)
        home = top / "home"
        home.mkdir()
        os.chown(home, uid, gid)
        venv = top / "venv"
        subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        site = Path(sysconfig.get_paths()["purelib"])
        target = Path(
            subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        )  # fmt: skip
        (target / "gitsess-shared.pth").write_text(f"{CHECKOUT}\n{site}\n")
        imports = [python, "-c", f"import {', '.join(LIBS)}"]
        if not _try(uid, gid, imports):
            # The checkout or its virtualenv is out of the user's reach: copies, then.
            shutil.copytree(CHECKOUT / "gitsess", top / "src" / "gitsess")
            shutil.copytree(site, top / "site", symlinks=True)
            (target / "gitsess-shared.pth").write_text(f"{top / 'src'}\n{top / 'site'}\n")
            if not _try(uid, gid, imports):
                pytest.fail(f"the user {USER} cannot import gitsess's libraries")
        with _fuse_for(uid, gid, top) as namespace:
            yield User(uid, gid, home, python, namespace)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@contextmanager
def _fuse_for(uid: int, gid: int, top: Path) -> Iterator[int | None]:
    """None when the user can open /dev/fuse; else the pid holding a mount namespace where it
    can (killed afterwards, which unmounts whatever the user left mounted there)."""
    if _try(uid, gid, ["sh", "-c", "exec 3<>/dev/fuse"]):
        yield None
        return
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        _skip("/dev/fuse is not for users here, and no nsenter/unshare to give them one")
    node = top / "fuse"
    st = os.stat("/dev/fuse")
    os.mknod(node, 0o666 | stat.S_IFCHR, st.st_rdev)
    node.chmod(0o666)
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", "sleep", "infinity"])
    try:
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            if time.monotonic() > deadline:
                pytest.fail("the user's mount namespace was not made")
            time.sleep(0.01)
        subprocess.run(
            ["nsenter", "-t", str(holder.pid), "-m", "mount", "--bind", str(node), "/dev/fuse"],
            check=True,
        )
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def make_user_repo(user: User, path: Path) -> Path:
    """A repository of the user's with one commit on `main`."""
    path.mkdir(parents=True)
    os.chown(path, user.uid, user.gid)
    script = (
        "git init -q -b main . && echo hello > README.md && mkdir src && "
        "echo \"print('hi')\" > src/app.py && git add -A && git commit -q -m first"
    )
    done = user.sh(path, script)
    assert done.returncode == 0, done.stderr
    return path
