"""git's fsmonitor answered by the session's journal must never change what `git status` says."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gitsess.overlay import fsmonitor_hook
from gitsess.services import live
from gitsess.services.live import FSMONITOR_CONFIG, git_config_env
from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse

NOBODY = 65534
HOOKS = {"python": live.PYTHON_HOOK, "compiled": shlex.quote(live.COMPILED_HOOK)}


@pytest.fixture(params=sorted(HOOKS))
def hook(request: pytest.FixtureRequest) -> str:
    """git's `core.fsmonitor`, each of the two hooks: the compiled one wherever the install
    had a C compiler, the Python one (its fallback) everywhere."""
    if request.param == "compiled":
        if shutil.which("cc") is None:
            pytest.skip("no C compiler: the install built no compiled hook")
        assert os.access(live.COMPILED_HOOK, os.X_OK), "scripts/setup.sh builds it"
    return HOOKS[str(request.param)]


def status(m: Mounted, *, monitored: bool, untracked: str = "all", hook: str | None = None) -> str:
    # The hook finds the daemon in the session dir, `$GITSESS_DIR/sessions/<id>`.
    state = m.spec.session_dir.parent / "state"
    link = state / "sessions" / m.spec.session_id
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(m.spec.session_dir)
    env = {**os.environ, "GITSESS_SESSION_ID": m.spec.session_id, "GITSESS_DIR": str(state)}
    if monitored:
        config = FSMONITOR_CONFIG if hook is None else {**FSMONITOR_CONFIG, "core.fsmonitor": hook}
        env.update(git_config_env({}, config))
        env["GIT_TRACE_FSMONITOR"] = str(m.spec.session_dir / "fsmonitor.trace")
        args = ["git", "status", "--porcelain=v2", f"--untracked-files={untracked}"]
    else:
        # A full scan on a copy of the index: it must not strip the fsmonitor token from the
        # index the monitored runs keep using.
        scratch = m.spec.session_dir / "scan.index"
        shutil.copyfile(m.lower / ".git" / "index", scratch)
        env["GIT_INDEX_FILE"] = str(scratch)
        args = ["git", "-c", "core.fsmonitor=", "-c", "core.untrackedCache=false", "status"]
        args += ["--porcelain=v2", f"--untracked-files={untracked}"]
    return subprocess.run(
        args, cwd=m.mnt, env=env, capture_output=True, text=True, check=True
    ).stdout


def agree(m: Mounted, timeout: float = 5.0, hook: str | None = None) -> None:
    """A change in the worktree reaches the kernel's caches through the watcher, a moment
    later: the monitored status first, whose query waits for the watcher to hand on every
    change made before it, and the full scan then sees them too. (Scanned first, the scan could
    miss a change the watcher had yet to hand on, and only a later round within the deadline
    agreed; the loop is now for a query that gave up waiting.)"""
    deadline = time.monotonic() + timeout
    while True:
        monitored = status(m, monitored=True, hook=hook)
        plain = status(m, monitored=False)
        if plain == monitored or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert monitored == plain


def test_fsmonitor_agrees_with_a_full_scan(mounted: Mounted, hook: str) -> None:
    m, lower = mounted.mnt, mounted.lower
    steps: list[Callable[[], object]] = [
        lambda: (m / "README").write_text("changed in the session\n"),
        lambda: (m / "src" / "new.py").write_text("new\n"),
        lambda: (lower / "src" / "main.py").write_text("edited in the real tree\n"),
        lambda: os.rename(m / "src" / "pkg" / "mod.py", m / "src" / "pkg" / "renamed.py"),
        lambda: os.unlink(m / "link"),
        lambda: os.chmod(m / "README", 0o755),
        lambda: shutil.rmtree(m / "bin"),
        lambda: (lower / "outside.txt").write_text("new in the real tree\n"),
        lambda: os.rename(m / "src", m / "lib"),
        lambda: os.utime(m / "lib" / "main.py", ns=(1, 1)),
    ]
    agree(mounted, hook=hook)
    for step in steps:
        step()
        agree(mounted, hook=hook)
    trace = (mounted.spec.session_dir / "fsmonitor.trace").read_text()
    # The hook really answered, with paths (not only "everything changed").
    assert f"{os.path.basename(shlex.split(hook)[-1])}' returned success" in trace
    assert "fsmonitor_refresh_callback 'README'" in trace


def test_unknown_token_means_everything(mounted: Mounted) -> None:
    from gitsess.overlay.fsmonitor_hook import ask

    session = str(mounted.spec.session_dir)
    mounted.wait_watched()
    reply = ask(session, "stale")
    assert reply is not None
    assert reply[1] is None
    fresh = ask(session, reply[0])
    assert fresh is not None and fresh[1] == []
    (mounted.mnt / "README").write_text("x")
    after = ask(session, fresh[0])
    assert after is not None and after[1] is not None and "README" in after[1]
    mounted.remount()
    again = ask(session, after[0])
    assert again is not None and again[1] is None


def test_a_worktree_edit_made_just_before_a_query_is_in_its_answer(mounted: Mounted) -> None:
    """The watch reports in batches some 30 ms after a change: a query must not answer before
    it has what the worktree saw up to the query (item 6 of issue 41)."""
    from gitsess.overlay.fsmonitor_hook import ask

    session = str(mounted.spec.session_dir)
    mounted.wait_watched()
    first = ask(session, "")
    assert first is not None
    token = first[0]
    for i in range(10):
        (mounted.lower / "src" / "main.py").write_text(f"edit {i}\n")
        reply = ask(session, token)
        assert reply is not None and reply[1] is not None
        assert "src/main.py" in reply[1]
        token = reply[0]


def test_a_file_made_in_the_worktree_shows_in_the_next_status(mounted: Mounted) -> None:
    mounted.wait_watched()
    agree(mounted)
    for i in range(5):
        (mounted.lower / f"new{i}.txt").write_text("made in the real tree\n")
        assert f"? new{i}.txt" in status(mounted, monitored=True)


def hook_answer(hook: str, session: Path, token: str) -> bytes:
    """What the hook writes for `token`, asking the daemon of session dir `session`."""
    env = {"GITSESS_DIR": str(session.parent.parent), "GITSESS_SESSION_ID": session.name}
    argv = [*shlex.split(hook), "2", token]
    return subprocess.run(argv, env=env, capture_output=True, check=True).stdout


def test_both_hooks_answer_alike(mounted: Mounted, tmp_path: Path) -> None:
    """The compiled hook's answer is the Python one's, byte for byte: file names that are not
    UTF-8 too (the daemon sends them as JSON escapes), and "everything" with no daemon."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler: the install built no compiled hook")
    state = tmp_path / "state" / "sessions" / mounted.spec.session_id
    state.parent.mkdir(parents=True)
    state.symlink_to(mounted.spec.session_dir)
    mounted.wait_watched()
    python, compiled = HOOKS["python"], HOOKS["compiled"]
    first = hook_answer(python, state, "stale")
    token = first.split(b"\0")[0].decode()
    (mounted.mnt / "src" / "é new.txt").write_text("x\n")
    with open(os.path.join(os.fsencode(mounted.mnt), b'caf\xe9\xff "q"\\'), "w") as f:
        f.write("not UTF-8\n")
    (mounted.lower / "README").write_text("edited outside\n")
    for asked in ("stale", token, "", 'a "quoted" \\ token\t', "gitsess-index:1.2.3.4"):
        answer = hook_answer(compiled, state, asked)
        assert answer == hook_answer(python, state, asked), asked
    changed = hook_answer(compiled, state, token).split(b"\0")
    assert {b"README", "src/é new.txt".encode(), b'caf\xe9\xff "q"\\'} <= set(changed)
    mounted.unmount()
    for hook in (python, compiled):
        assert hook_answer(hook, state, token) == fsmonitor_hook.UNKNOWN.encode() + b"\0/\0"


STRANGER = """
import os, socket, sys
os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
s = socket.socket(socket.AF_UNIX); s.bind(b"\\0" + sys.argv[1].encode()); s.listen()
print("ready", flush=True)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(b'{"ok": true, "token": "theirs", "paths": []}\\n')
    except OSError:
        pass  # (a hook that hung up on it)
    c.close()
"""


def stranger(session: Path, uid: int) -> subprocess.Popen[bytes]:
    """A process of user `uid` holding an abstract socket named in the session dir's control
    file, which answers any request as a daemon would: "nothing changed"."""
    name = "gitsess-stranger-" + os.urandom(8).hex()
    (session / fsmonitor_hook.NAME_FILE).write_text(name)
    proc = subprocess.Popen(["python3", "-c", STRANGER, name, str(uid)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_a_hook_believes_no_other_users_socket(hook: str, tmp_path: Path) -> None:
    """Any local user can bind an abstract name: a hook answers "everything" when the process
    at the other end is neither of its own user nor root."""
    session = tmp_path / "state" / "sessions" / "s"
    session.mkdir(parents=True)
    everything = fsmonitor_hook.UNKNOWN.encode() + b"\0/\0"
    for uid, expected in ((os.geteuid(), b"theirs\0"), (NOBODY, everything)):
        proc = stranger(session, uid)
        try:
            assert hook_answer(hook, session, "t") == expected, uid
        finally:
            proc.kill()
            proc.wait()


def test_git_runs_the_compiled_hook_where_the_install_built_it() -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler: the install built no compiled hook")
    assert FSMONITOR_CONFIG["core.fsmonitor"] == shlex.quote(live.COMPILED_HOOK)
