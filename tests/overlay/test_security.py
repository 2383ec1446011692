"""What another local user can do to a session: nothing (issue 29).

A second uid made with `useradd` acts from a forked child that dropped to it, so it needs no
access to this checkout or this Python.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitsess.git.repo import discover
from gitsess.overlay import control, protocol
from tests.util import gitsess

pytestmark = pytest.mark.fuse

OTHER = "gitsess-other"


@pytest.fixture(scope="session")
def other_uid() -> tuple[int, int]:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a second user")
    try:
        entry = pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", OTHER], check=True)
        entry = pwd.getpwnam(OTHER)
    return entry.pw_uid, entry.pw_gid


def as_user(user: tuple[int, int], action: Callable[[], bytes]) -> bytes:
    """Run `action` in a forked child that became `user`; what it returned (or its error)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
            out = action()
        except BaseException as e:
            out = f"error: {e!r}".encode()
        os.write(write, out)
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return b"".join(chunks)


def listening_name(session_id: str) -> bytes:
    """The daemon's name as anyone sees it in /proc/net/unix (the file naming it is private)."""
    with open("/proc/net/unix", "rb") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 8 and fields[7].startswith(b"@gitsess-" + session_id.encode()):
                return b"\0" + fields[7][1:]
    raise AssertionError("no daemon listens")


def ask(session_id: str, message: dict[str, object]) -> Callable[[], bytes]:
    name = listening_name(session_id)

    def action() -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(name)
            sock.sendall(json.dumps(message).encode() + b"\n")
            return b"reply: " + sock.recv(65536)

    return action


@pytest.fixture
def mounted(repo: Path, tmp_path: Path) -> Iterator[str]:
    """A session kept mounted by root; its session dir."""
    assert gitsess(repo, "new", "exp").returncode == 0
    view = tmp_path / "view"
    view.mkdir()
    done = gitsess(repo, "mount", "exp", str(view))
    assert done.returncode == 0, done.stderr
    shown = json.loads(gitsess(repo, "show", "exp", "--json").stdout)
    try:
        yield str(discover(repo).session_dir(shown["id"]))
    finally:
        gitsess(repo, "umount", "exp")


@pytest.mark.parametrize("op", ["status", "fsmonitor", "drop", "stop", "sync"])
def test_another_user_gets_nothing_from_the_control_socket(
    repo: Path, mounted: str, other_uid: tuple[int, int], op: str
) -> None:
    out = as_user(other_uid, ask(Path(mounted).name, {"op": op, "paths": ["README.md"]}))
    # closed unanswered: an empty reply, or the write or read failing on the closed socket
    assert out == b"reply: " or b"BrokenPipe" in out or b"ConnectionReset" in out, out
    assert protocol.status(mounted) is not None  # still serving its owner
    assert str(repo) not in out.decode(errors="replace")


def test_copy_goes_only_to_a_new_session_dir(repo: Path, mounted: str, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    for dest in (target / "delta.db", tmp_path / "x" / "delta.db", Path("/etc/gitsess-owned")):
        with pytest.raises(protocol.Refused):
            protocol.copy(mounted, str(dest), 30)
        assert not dest.exists()


def squat(other_uid: tuple[int, int], name: bytes) -> int:
    """A process of the other user that holds `name` (and answers lies on it); its pid."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.setgroups([])
        os.setgid(other_uid[1])
        os.setuid(other_uid[0])
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(name)
        server.listen(1)
        os.write(ready_w, b"x")
        server.settimeout(30)
        try:
            while True:
                conn, _ = server.accept()
                conn.recv(100)
                conn.sendall(b'{"ok": true, "daemon_pid": 1, "mountpoint": "/"}\n')
        except OSError:
            pass
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    return pid


def test_a_name_bound_by_another_user_is_not_believed(
    tmp_path: Path, other_uid: tuple[int, int]
) -> None:
    fake = str(uuid.uuid4())
    name = b"\0gitsess-" + fake.encode()
    control.publish(str(tmp_path), name)
    pid = squat(other_uid, name)
    try:
        assert protocol.status(str(tmp_path)) is None
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_another_user_cannot_take_the_sessions_name_first(
    repo: Path, other_uid: tuple[int, int]
) -> None:
    """The name a session's daemon listens on cannot be known before it is taken: the old
    `\\0gitsess-<id>` (the id is in everyone's /proc/self/mountinfo) held by another user
    stops nothing."""
    assert gitsess(repo, "new", "exp").returncode == 0
    session_id = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["id"]
    pid = squat(other_uid, b"\0gitsess-" + session_id.encode())
    try:
        done = gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo in > in.txt; cat in.txt")
        assert (done.returncode, done.stdout) == (0, "in\n"), done.stderr
        session_dir = discover(repo).session_dir(session_id)
        assert (session_dir / control.NAME_FILE).stat().st_mode & 0o077 == 0
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_refused_connections_do_not_fill_the_log(
    repo: Path, mounted: str, other_uid: tuple[int, int]
) -> None:
    log = Path(mounted) / "daemon.log"
    before = log.stat().st_size
    name = listening_name(Path(mounted).name)

    def hammer() -> bytes:
        for _ in range(300):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                try:
                    sock.connect(name)
                    sock.recv(10)
                except OSError:
                    pass
        return b"done"

    assert as_user(other_uid, hammer) == b"done"
    assert protocol.status(mounted) is not None  # every refusal was handled before this answer
    added = log.read_text()[before:]
    assert added.count("refused") == 1, added
    assert "refused 1 control connection(s) from uid" in added


def test_the_state_dir_is_made_private_whatever_it_was(repo: Path) -> None:
    state = repo / ".git" / "gitsess"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    assert gitsess(repo, "new", "exp").returncode == 0
    assert state.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("name", ["types.py", "enum.py", "signal.py", "select.py"])
def test_the_repositorys_own_modules_are_never_imported(repo: Path, name: str) -> None:
    """The daemon, its watch and the hooks start with no current directory on sys.path: a
    repository's `types.py` (click's own source has one) must neither break gitsess nor run."""
    marker = repo.parent / f"ran-{name}"
    (repo / name).write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    # the console script, as a user runs it (`python -m gitsess` would import from here itself)
    script = str(Path(sys.executable).with_name("gitsess"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], cwd=repo, capture_output=True, text=True)

    done = run("run", "-s", "exp", "--", "sh", "-c", "echo x > new.txt")
    assert done.returncode == 0, done.stderr
    installed = run("hooks", "install")
    assert installed.returncode == 0, installed.stderr
    subprocess.run(["git", "branch", "-q", "gone"], cwd=repo, check=True)
    subprocess.run(["git", "branch", "-q", "-D", "gone"], cwd=repo, check=True)
    assert not marker.exists()


@pytest.mark.parametrize("target", ["--worktree", "--commit"])
def test_apply_never_writes_setuid_or_setgid(repo: Path, target: str) -> None:
    script = "printf '#!/bin/sh\\n' > tool && chmod 6755 tool && mkdir d && chmod 3775 d"
    script += " && echo x > d/f && stat -c %a tool"
    done = gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("6755", "755")  # the view may refuse the bits already
    args = ("--commit", "-m", "tool") if target == "--commit" else ("--worktree",)
    applied = gitsess(repo, "apply", "exp", *args)
    assert applied.returncode == 0, applied.stderr
    assert oct((repo / "tool").stat().st_mode & 0o7777) == oct(0o755)
    assert (repo / "d").stat().st_mode & 0o7000 == 0


def test_views_are_mounted_nosuid_nodev(repo: Path) -> None:
    done = gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", f"grep ' {repo} ' /proc/self/mounts")
    assert done.returncode == 0, done.stderr
    options = done.stdout.split()[3].split(",")
    assert "nosuid" in options and "nodev" in options


def test_titles_never_reach_the_terminal_raw(repo: Path) -> None:
    title = "fine\x1b]0;owned\x07 \x9b2J\nsecond line"
    assert gitsess(repo, "new", "exp", "-t", title).returncode == 0
    for args in (("ls",), ("show", "exp")):
        out = gitsess(repo, *args, env={"COLUMNS": "200"}).stdout
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
        assert "fine\\x1b]0;owned\\x07" in out
        assert "second line" not in out


_PRINTER = """
[printer]
description = "prints its environment"
command = ["sh", "-c", "env | sort"]
env = "PRINTER_HOME"
source = "~/.printer"
"""


@pytest.mark.parametrize("allow", [None, ["PATH", "LANG", "LC_*"]])
def test_an_agent_sees_only_the_environment_its_profile_allows(
    repo: Path, allow: list[str] | None
) -> None:
    profile = _PRINTER + (f"env_allow = {json.dumps(allow)}\n" if allow else "")
    (repo / ".git" / "gitsess").mkdir(exist_ok=True)
    (repo / ".git" / "gitsess" / "agents.toml").write_text(profile)
    env = {"GITSESS_TOKEN": "s3cret", "LANG": "C.UTF-8", "LC_ALL": "C"}
    done = gitsess(repo, "run", "-s", "exp", "--agent", "printer", env=env)
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert ("GITSESS_TOKEN" in seen) == (allow is None)
    for always in ("PATH", "PRINTER_HOME", "GITSESS_SESSION", "GITSESS_DIR", "GIT_CONFIG_COUNT"):
        assert always in seen, always
    assert seen["LC_ALL"] == "C" and seen["LANG"] == "C.UTF-8"
    if allow:
        assert "HOME" not in seen
