"""The main paths as an ordinary user made with `useradd` (issue 37, items 8, 9 and 11), and
the others an agent takes (checkpoints and undo, fork, restore, hooks, worktree sessions, agent
roles, the MCP server): a user needs root for nothing but installing packages.

scripts/test.sh runs this file on its own as well, so CI shows it ran (and did not skip).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nonroot import User, make_user_repo, user_env

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def user() -> Iterator[User]:
    with user_env() as u:
        yield u


@pytest.fixture
def repo(user: User) -> Iterator[Path]:
    top = user.home / f"r{os.urandom(4).hex()}"
    path = make_user_repo(user, top / "repo")
    try:
        yield path
    finally:
        listed = user.gitsess(path, "ls", "--json")
        for s in json.loads(listed.stdout) if listed.returncode == 0 else []:
            user.gitsess(path, "umount", s["name"])


def ok(done: object) -> str:
    assert getattr(done, "returncode", 1) == 0, getattr(done, "stderr", "")
    return str(getattr(done, "stdout", ""))


def test_the_main_paths(user: User, repo: Path) -> None:
    ok(user.gitsess(repo, "new", "exp"))
    # In place: the worktree's own path shows the view, absolute paths included.
    script = (
        f"pwd; echo changed > {repo}/README.md; echo new > new.txt; "
        "git add new.txt && git commit -q -m 'made inside' && git log -1 --format=%s"
    )
    out = ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script))
    assert out.splitlines() == [str(repo), "made inside"]
    assert (repo / "README.md").read_text() == "hello\n"
    assert not (repo / "new.txt").exists()
    # Objects git made inside (0444, written through the descriptor that made them) are whole.
    fsck = ok(user.gitsess(repo, "run", "-s", "exp", "--", "git", "fsck", "--no-dangling"))
    assert "error" not in fsck
    ok(user.gitsess(repo, "apply", "exp", "--commit", "-m", "from the session"))
    log = ok(user.run(["git", "log", "--format=%s"], repo)).split("\n")
    assert log[:3] == ["from the session", "made inside", "first"]
    assert (repo / "new.txt").read_text() == "new\n"
    assert (repo / "README.md").read_text() == "changed\n"
    # mount / umount
    view = user.home / f"view-{os.urandom(4).hex()}"
    ok(user.run(["mkdir", str(view)], repo))
    ok(user.gitsess(repo, "new", "two"))
    ok(user.gitsess(repo, "mount", "two", str(view)))
    ok(user.run(["sh", "-c", f"echo two > {view}/two.txt"], repo))
    assert ok(user.gitsess(repo, "diff", "two", "--name-only")).split() == ["two.txt"]
    ok(user.gitsess(repo, "umount", "two"))
    assert not (view / "two.txt").exists()
    # rm, gc
    ok(user.gitsess(repo, "rm", "two", "--force"))
    ok(user.gitsess(repo, "gc"))
    names = [s["name"] for s in json.loads(ok(user.gitsess(repo, "ls", "--json")))]
    assert "two" not in names


def test_a_run_is_sealed_for_a_user_too(user: User, repo: Path) -> None:
    """As a user the run holds every capability in its own user namespace; still it can take
    neither the view off the worktree nor the seal off the state dir, nor see out."""
    ok(user.gitsess(repo, "new", "exp"))
    script = (
        "echo view > README.md; "
        f"umount -l {repo} 2>/dev/null && echo unmounted-view; "
        "mount -o remount,rw,bind .git/gitsess 2>/dev/null && echo remounted; "
        "rm -f .git/gitsess/sessions/*/delta.db* 2>/dev/null || echo no-rm; "
        'echo escaped > "/proc/$PPID/root$PWD/README.md" 2>/dev/null; '
        # the real object store, which the user owns, is read-only where the alternates name it
        'real=$(cat .git/objects/info/alternates); touch "$real"/* 2>/dev/null || echo no-touch; '
        'umount "$real" 2>/dev/null && echo unmounted-store; '
        "cat README.md"
    )
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (repo / ".git" / "objects").iterdir())
    out = ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script))
    assert out.splitlines() == ["no-rm", "no-touch", "view"]
    assert (
        sorted((p.name, p.stat().st_mtime_ns) for p in (repo / ".git" / "objects").iterdir())
        == before
    )
    assert (repo / "README.md").read_text() == "hello\n"
    assert list((repo / ".git" / "gitsess" / "sessions").glob("*/delta.db"))


def test_a_run_cannot_make_its_session_unremovable(user: User, repo: Path) -> None:
    """A run owns its session's object store; taking its own write and search rights from a
    directory there must not keep `rm` from removing the session."""
    ok(user.gitsess(repo, "new", "exp"))
    script = (
        "echo x > x.txt && git add x.txt && git commit -qm inside && "
        "chmod 0 .git/objects/info && chmod 500 .git/objects/pack && "
        "chmod 0 .git/objects/$(git rev-parse HEAD | cut -c1-2)"
    )
    ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", script))
    ok(user.gitsess(repo, "rm", "exp", "--force"))
    assert not list((repo / ".git" / "gitsess" / "sessions").iterdir())
    assert "exp" not in ok(user.gitsess(repo, "ls"))


def test_doctor_and_allow_other_say_what_a_user_needs(user: User, repo: Path) -> None:
    """Issue 37 items 9 and 10: doctor tries what a run does; --allow-other without
    user_allow_other names the fix instead of "fuse_session_mount failed"."""
    doctor = user.gitsess(repo, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert checks["runs in place"]["verdict"] == "ok", checks["runs in place"]
    assert checks["/dev/fuse"]["verdict"] == "ok", checks["/dev/fuse"]
    conf = Path("/etc/fuse.conf")
    allowed = conf.exists() and "user_allow_other" in conf.read_text().splitlines()
    ok(user.gitsess(repo, "new", "exp"))
    mounted = user.gitsess(repo, "mount", "exp", "--allow-other")
    if allowed:
        assert mounted.returncode == 0, mounted.stderr
        return
    assert checks["mount --allow-other"]["verdict"] == "warn"
    assert "echo user_allow_other >> /etc/fuse.conf" in checks["mount --allow-other"]["detail"]
    assert mounted.returncode == 1
    assert "user_allow_other" in mounted.stderr and "fuse_session_mount" not in mounted.stderr


def test_doctor_names_the_fix_for_a_dev_fuse_users_cannot_open(user: User) -> None:
    """Issue 37 item 10: libfuse opens /dev/fuse itself before it asks fusermount3."""
    node = user.home / "fuse-0600"
    os.mknod(node, 0o600 | stat.S_IFCHR, os.stat("/dev/fuse").st_rdev)
    try:
        code = (
            "from pathlib import Path; from gitsess.services.doctor import check_dev_fuse; "
            f"c = check_dev_fuse(Path({str(node)!r})); print(c.verdict); print(c.detail)"
        )
        verdict, detail = ok(user.run([user.python, "-c", code], user.home)).splitlines()
    finally:
        node.unlink()
    assert verdict == "fail"
    assert f"chmod 0666 {node}" in detail


def test_checkpoints_fork_and_restore(user: User, repo: Path) -> None:
    """The undo paths and the copies of a session (checkpoint, rewind, undo, kv, fork, rm,
    restore), as a user: every file they make is the user's."""
    ok(user.gitsess(repo, "new", "exp"))
    ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo one > a.txt"))
    made = ok(user.gitsess(repo, "checkpoint", "exp"))
    cp = made.split()[1]
    ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", "echo two > a.txt; rm README.md"))
    ok(user.gitsess(repo, "rewind", "exp", cp))
    back = "cat a.txt; ls"
    assert ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", back)).split() == [
        "one",
        "README.md",
        "a.txt",
        "src",
    ]
    ok(user.gitsess(repo, "undo", "exp"))
    assert ok(user.gitsess(repo, "run", "-s", "exp", "--", "sh", "-c", back)).split() == [
        "two",
        "a.txt",
        "src",
    ]
    ok(user.gitsess(repo, "kv", "exp", "set", "status", '{"tests": "pass"}', "--json"))
    ok(user.gitsess(repo, "fork", "exp", "copy"))
    ok(user.gitsess(repo, "rm", "copy", "--force"))
    ok(user.gitsess(repo, "restore", "copy"))
    assert ok(user.gitsess(repo, "diff", "copy", "--name-only")).split() == ["README.md", "a.txt"]
    assert json.loads(ok(user.gitsess(repo, "kv", "copy", "get", "status", "--json"))) == {
        "tests": "pass"
    }
    state = repo / ".git" / "gitsess"
    foreign = [p for p in state.rglob("*") if p.lstat().st_uid != user.uid]
    assert foreign == []


def test_hooks_worktrees_and_agents(user: User, repo: Path) -> None:
    """Git hooks clean a deleted branch's session; a --worktree session commits and applies;
    two roles of one agent CLI get two state dirs; the MCP server answers; all as a user."""
    ok(user.gitsess(repo, "hooks", "install"))
    ok(user.sh(repo, "git checkout -q -b feat"))
    ok(user.gitsess(repo, "new", "onfeat"))
    ok(user.gitsess(repo, "run", "-s", "onfeat", "--", "sh", "-c", "echo f > f.txt"))
    ok(user.sh(repo, "git checkout -q main && git branch -q -D feat"))
    names = [s["name"] for s in json.loads(ok(user.gitsess(repo, "ls", "--json")))]
    assert "onfeat" not in names
    assert "onfeat" in ok(user.gitsess(repo, "archives"))

    ok(user.gitsess(repo, "new", "wt", "--worktree"))
    script = "echo w > w.txt && git add w.txt && git commit -qm 'in its worktree' && pwd"
    where = ok(user.gitsess(repo, "run", "-s", "wt", "--", "sh", "-c", script)).strip()
    ok(user.gitsess(repo, "apply", "wt", "--commit"))
    log = ok(user.run(["git", "log", "-1", "--format=%s", "gitsess/wt"], repo)).strip()
    assert log == "in its worktree"
    assert (Path(where) / "w.txt").read_text() == "w\n"

    bindir = user.home / "bin"
    agent = (
        '#!/bin/sh\nd="$CLAUDE_CONFIG_DIR"; test -n "$d" || exit 3\n'
        'echo "$d"; cat "$d/said" 2>/dev/null; echo "$1 $2" > "$d/said"\n'
    )
    ok(user.sh(repo, f"mkdir -p {bindir} && printf '%s' '{agent}' > {bindir}/claude"))
    ok(user.sh(repo, f"chmod +x {bindir}/claude"))
    path = {"PATH": f"{bindir}:/usr/bin:/bin"}
    ok(user.gitsess(repo, "new", "agents"))
    first = ok(user.gitsess(repo, "run", "-s", "agents", "--agent", "claude", env=path))
    second = ok(
        user.gitsess(repo, "run", "-s", "agents", "--agent", "claude", "--role", "b", env=path)
    )
    again = ok(user.gitsess(repo, "run", "-s", "agents", "--agent", "claude", env=path))
    assert first.splitlines()[0] != second.splitlines()[0]
    assert len(first.splitlines()) == len(second.splitlines()) == 1  # nothing said before
    assert again.splitlines()[0] == first.splitlines()[0]
    assert again.splitlines()[1].startswith("--mcp-config ")  # its own conversation, resumed

    # A client that keeps the server's stdin open until the answer came (at its end, the
    # server stops without answering what is in flight).
    client = (
        "import json, subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'gitsess', 'mcp'], stdin=-1, stdout=-1,"
        " text=True)\n"
        "def send(m): p.stdin.write(json.dumps(m) + '\\n'); p.stdin.flush()\n"
        "send({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {"
        "'protocolVersion': '2024-11-05', 'capabilities': {},"
        " 'clientInfo': {'name': 'test', 'version': '1'}}})\n"
        "p.stdout.readline()\n"
        "send({'jsonrpc': '2.0', 'method': 'notifications/initialized'})\n"
        "send({'jsonrpc': '2.0', 'id': 2, 'method': 'tools/call',"
        " 'params': {'name': 'sessions', 'arguments': {}}})\n"
        "print(p.stdout.readline(), end='')\n"
        "p.stdin.close(); sys.exit(p.wait())\n"
    )
    answer = json.loads(ok(user.run([user.python, "-c", client], repo)))
    assert answer["id"] == 2
    listed = answer["result"]
    assert not listed.get("isError"), listed
    assert "agents" in json.dumps(listed) and "wt" in json.dumps(listed)
