"""push, pull and ls --remote, with a local bare repository as the remote: two clones of it
are two machines."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest
from pygit2.enums import CredentialType, ObjectType
from rich.console import Console

from gitsess.cli.remote_cmds import TransferBars, bars
from gitsess.errors import GitsessError
from gitsess.git import published, transport
from gitsess.git.repo import RepoContext, discover
from gitsess.services import kv, sessions
from gitsess.services.viewwrite import view_writer
from gitsess.store.registry import Registry
from tests.apply_util import Cli
from tests.live_util import unmount_all
from tests.util import commit, gitsess, make_repo
from tests.util import git as git_ok

REF = "refs/gitsess/sessions/exp"


@dataclass
class Machine:
    """One clone of the remote, with gitsess run in process from its top directory."""

    path: Path
    cli: Cli
    monkeypatch: pytest.MonkeyPatch

    def __call__(self, *args: str, code: int = 0) -> tuple[str, str]:
        self.monkeypatch.chdir(self.path)
        return self.cli(*args, code=code)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json")[0])

    @property
    def ctx(self) -> RepoContext:
        return discover(self.path)

    def session(self, name: str = "exp") -> sessions.Session:
        return sessions.resolve(self.ctx, name)

    def run(self, script: str, session: str = "exp") -> str:
        """`gitsess run -s SESSION -- sh -c SCRIPT` as a real process; its stdout."""
        done = gitsess(self.path, "run", "-s", session, "--", "sh", "-c", script)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def write(self, rel: str, text: str, session: str = "exp") -> None:
        """Write into the session's view without mounting it."""
        s = self.session(session)
        with view_writer(self.ctx, s, s.worktree) as writer:
            writer.put_file(rel, (text.encode(),), 0o644)


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    bare = tmp_path / "origin.git"
    git_ok(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    return bare


@pytest.fixture
def a(tmp_path: Path, origin: Path, capsys: pytest.CaptureFixture[str],
      monkeypatch: pytest.MonkeyPatch) -> Iterator[Machine]:  # fmt: skip
    path = make_repo(tmp_path / "a")
    git_ok(path, "remote", "add", "origin", str(origin))
    git_ok(path, "push", "-q", "origin", "main")
    try:
        yield Machine(path, Cli(capsys), monkeypatch)
    finally:
        unmount_all(path)


@pytest.fixture
def b(tmp_path: Path, origin: Path, a: Machine, capsys: pytest.CaptureFixture[str],
      monkeypatch: pytest.MonkeyPatch) -> Iterator[Machine]:  # fmt: skip
    path = tmp_path / "b"
    git_ok(tmp_path, "clone", "-q", str(origin), str(path))
    try:
        yield Machine(path, Cli(capsys), monkeypatch)
    finally:
        unmount_all(path)


def remote_git(origin: Path, *args: str) -> str:
    return git_ok(origin, *args)


# ---------------------------------------------------------------------------------------------
# the whole round, through real sessions


@pytest.mark.fuse
def test_push_pull_resume_change_push_again_pull_the_update(
    a: Machine, b: Machine, origin: Path
) -> None:
    a("new", "exp", "-t", "an experiment")
    a.run(
        "echo changed > README.md; mkdir -p notes; echo idea > notes/idea.txt; rm src/app.py;"
        " printf '#!/bin/sh\\n' > tool.sh; chmod +x tool.sh; ln -s notes/idea.txt link"
    )
    out, _ = a("push", "exp")
    assert "Pushed session exp to origin as refs/gitsess/sessions/exp" in out
    head = git_ok(a.path, "rev-parse", "HEAD")
    parents = remote_git(origin, "log", "-1", "--format=%P", REF).split()
    assert parents == [head]  # the base; nothing to follow yet
    message = remote_git(origin, "log", "-1", "--format=%B", REF)
    assert "Gitsess-Name: exp" in message and "Gitsess-Title: an experiment" in message
    assert "Gitsess-Branch: main" in message and "Gitsess-Runs: 1" in message
    assert "Gitsess-Ops: " in message and "unlink=1" in message
    changed = remote_git(origin, "diff", "--name-status", f"{REF}^1", REF)
    assert sorted(changed.splitlines()) == [
        "A\tlink", "A\tnotes/idea.txt", "A\ttool.sh", "D\tsrc/app.py", "M\tREADME.md",
    ]  # fmt: skip
    assert "100755" in remote_git(origin, "ls-tree", REF, "tool.sh")

    out, _ = b("pull", "exp")
    assert "new session on main in" in out and "5 changed file(s)" in out
    pulled = b.session()
    assert pulled.id != a.session().id and pulled.title == "an experiment"
    assert pulled.worktree == b.path.resolve() and pulled.base_commit == head
    assert b.run("cat README.md notes/idea.txt link; test -x tool.sh; test ! -e src/app.py") == (
        "changed\nidea\nidea\n"
    )
    assert (b.path / "README.md").read_text() == "hello\n"  # the real tree is untouched

    b.run("echo more >> notes/idea.txt")
    b("push", "-1")  # the newest session
    second = published.read(pygit2.Repository(str(origin)), remote_git(origin, "rev-parse", REF))
    assert second.previous is not None  # it follows the first push
    out, _ = a("pull", "exp")
    assert "fast-forwarded" in out
    assert a.run("cat notes/idea.txt") == "idea\nmore\n"
    [listed] = a.json("ls", "--remote")
    assert (listed["name"], listed["sync"], listed["changed_files"]) == ("exp", "synced", 5)
    out, _ = a("pull", "exp")
    assert "already up to date" in out


@pytest.mark.fuse
def test_nothing_secret_leaves_the_machine(a: Machine, b: Machine, origin: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text('{"token": "CRED-SECRET"}')
    (home / ".git-credentials").write_text("https://u:HELPER-SECRET@example.com\n")
    (a.path / ".gitignore").write_text(".env\n")
    git_ok(a.path, "add", ".gitignore")
    git_ok(a.path, "commit", "-q", "-m", "ignore .env")
    git_ok(a.path, "push", "-q", "origin", "main")
    a("new", "exp")
    # an agent keeps its conversation in its own home; an ignored file and a command line
    # carry secrets too
    script = (
        'echo AGENT-SECRET > "$CLAUDE_CONFIG_DIR/conversation.jsonl";'
        ' cat "$CLAUDE_CONFIG_DIR/.credentials.json" > /dev/null;'
        ' echo "KEY=ENV-SECRET" > .env; echo work > work.txt; : ARGV-SECRET'
    )
    done = gitsess(a.path, "run", "-s", "exp", "--agent", "claude", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    a("kv", "exp", "set", "token", "KV-SECRET")
    secrets = ["CRED-SECRET", "HELPER-SECRET", "AGENT-SECRET", "ENV-SECRET", "ARGV-SECRET"]

    a("push", "exp")
    found = strings_reachable(origin, REF)
    assert "work" in found  # the walk does see the session's files
    assert [s for s in [*secrets, "KV-SECRET"] if s in found] == []

    a("kv", "exp", "set", "note", "shared")
    out, _ = a("push", "exp", "--with-kv")
    assert "with its key-value store" in out
    found = strings_reachable(origin, REF)
    assert "KV-SECRET" in found and [s for s in secrets if s in found] == []
    kv_json = json.loads(remote_git(origin, "show", f"{REF}:{published.KV_PATH}"))
    assert kv_json == {"note": "shared", "token": "KV-SECRET"}
    assert f"Gitsess-Kv: {published.KV_PATH}" in remote_git(origin, "log", "-1", "--format=%B", REF)

    git_ok(b.path, "pull", "-q", "origin", "main")  # the session's base
    out, _ = b("pull", "exp")
    assert "2 key(s)" in out
    assert kv.get(b.ctx, b.session(), "token").value == "KV-SECRET"
    assert b.run("ls -A") == ".git\n.gitignore\nREADME.md\nsrc\nwork.txt\n"  # no .gitsess


def strings_reachable(bare: Path, ref: str) -> str:
    """The text of every object reachable from `ref`: commits (messages, signatures), trees
    (names), blobs (content)."""
    repo = pygit2.Repository(str(bare))
    seen: set[pygit2.Oid] = set()
    parts: list[str] = []
    pending = [repo.references[ref].target]
    while pending:
        oid = pending.pop()
        assert isinstance(oid, pygit2.Oid)
        if oid in seen:
            continue
        seen.add(oid)
        obj = repo[oid]
        parts.append(obj.read_raw().decode(errors="replace"))
        if obj.type == ObjectType.COMMIT:
            commit = obj.peel(pygit2.Commit)
            pending += [commit.tree_id, *commit.parent_ids]
        elif obj.type == ObjectType.TREE:
            pending += [entry.id for entry in obj.peel(pygit2.Tree)]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# divergence, without mounting (writes go straight into delta.db)


def test_diverged_pull_is_refused_unless_forced(a: Machine, b: Machine, origin: Path) -> None:
    a("new", "exp")
    a.write("README.md", "first\n")
    a("push", "exp")
    b("pull", "exp")
    a.write("mine.txt", "a's work\n")
    b.write("theirs.txt", "b's work\n")
    b("push", "exp")

    _, err = a("pull", "exp", code=1)
    assert "session exp has diverged from origin's (it has changes here that were never " in err
    _, err = a("push", "exp", code=1)
    assert "origin has session exp at" in err and "with work never pulled here" in err
    # as pull says: one relation for both
    assert json.loads(a("ls", "--remote", "--json")[0])[0]["sync"] == "diverged"

    out, err = a("pull", "exp", "--force")
    assert "replaced by theirs" in out and "archived as refs/gitsess/archive/exp" in err
    assert names(a) == ["README.md", "theirs.txt"]
    assert git_ok(a.path, "show", "refs/gitsess/archive/exp:mine.txt") == "a's work"


def test_push_force_keeps_theirs_in_history(a: Machine, b: Machine, origin: Path) -> None:
    a("new", "exp")
    a.write("README.md", "first\n")
    a("push", "exp")
    b("pull", "exp")
    b.write("theirs.txt", "b's work\n")
    b("push", "exp")
    theirs = remote_git(origin, "rev-parse", REF)
    a.write("mine.txt", "a's work\n")
    _, err = a("push", "--force", "exp")
    assert "it stays in the session commit's history" in err
    assert remote_git(origin, "log", "-1", "--format=%P", REF).split()[1] == theirs
    # b has not changed since its push: it is behind, and fast-forwards
    out, _ = b("pull", "exp")
    assert "fast-forwarded" in out
    assert names(b) == ["README.md", "mine.txt"]


def test_a_session_that_changed_but_was_never_synced_is_not_overwritten(
    a: Machine, b: Machine
) -> None:
    a("new", "exp")
    a("push", "exp")
    b("new", "exp")
    b.write("local.txt", "b's own session of that name\n")
    _, err = b("pull", "exp", code=1)
    assert "diverged" in err
    b("pull", "exp", "--force")
    assert names(b) == []


def test_pushing_the_same_state_again_pushes_nothing(a: Machine, origin: Path) -> None:
    a("new", "exp")
    a.write("README.md", "first\n")
    a("push", "exp")
    before = remote_git(origin, "rev-parse", REF)
    out, _ = a("push", "exp")
    assert "origin already has session exp as it is here" in out
    assert remote_git(origin, "rev-parse", REF) == before


def test_pull_needs_a_worktree_of_the_branch(a: Machine, b: Machine, origin: Path) -> None:
    git_ok(a.path, "switch", "-q", "-c", "feature")
    a("new", "exp", "-t", "on a feature branch")
    a.write("feature.txt", "x\n")
    git_ok(a.path, "push", "-q", "origin", "feature")
    a("push", "exp")
    _, err = b("pull", "exp", code=1)
    assert err == (
        "gitsess: no worktree has branch feature checked out for session exp; pass --worktree "
        "to create one\n"
    )
    b("pull", "exp", "--worktree")
    s = b.session()
    assert s.branch == "feature" and s.created_worktree and s.created_branch
    assert s.worktree.is_relative_to(b.ctx.worktrees_dir)
    assert git_ok(b.path, "rev-parse", "feature") == git_ok(a.path, "rev-parse", "feature")
    assert names(b) == ["feature.txt"]
    b("rm", "exp", "--force")
    assert not s.worktree.exists()


def test_pull_errors(a: Machine, b: Machine) -> None:
    _, err = b("pull", "nope", code=1)
    assert err == "gitsess: origin has no session nope (`gitsess ls --remote origin`)\n"
    _, err = b("pull", "exp", "upstream", code=1)
    assert err == "gitsess: no remote 'upstream' (configured remotes: origin); or give a URL\n"
    _, err = b("pull", "exp", str(b.path / "missing.git"), code=1)
    assert err.startswith("gitsess: ") and err.count("\n") == 1
    out, _ = b("ls", "--remote")
    assert out == "origin carries no sessions.\n"
    _, err = b("ls", "--remote", "--everywhere", code=2)
    assert "--remote and --everywhere" in err


def test_a_url_as_remote_and_remote_or_session_words(a: Machine, origin: Path) -> None:
    a("new", "exp")
    a("new", "origin")  # a session named like the remote
    _, err = a("push", "origin", code=2)
    assert "names both a session and a remote" in err
    a("push", "exp", origin.as_uri())
    assert remote_git(origin, "for-each-ref", "--format=%(refname)") .splitlines() == [
        "refs/gitsess/sessions/exp", "refs/heads/main"
    ]  # fmt: skip
    listed = a.json("ls", "--remote", str(origin))
    assert [r["name"] for r in listed] == ["exp"]
    a("push", "-s", "origin", "origin")
    assert len(a.json("ls", "--remote")) == 2


def test_rm_forgets_the_sync_record(a: Machine) -> None:
    a("new", "exp")
    a("push", "exp")
    session = a.session()
    registry = Registry.open(a.ctx.registry_path, create=False)
    assert registry is not None
    try:
        assert registry.synced(session.id) is not None
        a("rm", "exp")
        assert registry.conn.execute("SELECT count(*) FROM synced").get == 0
    finally:
        registry.close()


def names(machine: Machine, session: str = "exp") -> list[str]:
    out, _ = machine("diff", session, "--name-only")
    return out.split()


# ---------------------------------------------------------------------------------------------
# credentials and progress


def callbacks(
    tmp_path: Path, env: dict[str, str], helper: str | None = None
) -> transport.Callbacks:
    repo = pygit2.init_repository(str(tmp_path / "creds"))
    if helper is not None:
        repo.config["credential.helper"] = helper
    remote = transport.open_remote(repo, "https://example.com/team/repo.git")
    return transport.Callbacks(remote, None, env)


def test_token_from_the_environment_then_credential_helper(tmp_path: Path) -> None:
    helper = tmp_path / "helper.sh"
    helper.write_text(
        '#!/bin/sh\nread -r line\n[ "$line" = protocol=https ] || exit 1\n'
        "echo username=helper-user\necho password=helper-pass\n"
    )
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    cb = callbacks(tmp_path, {"GITSESS_TOKEN": "tok", "PATH": os.defpath}, str(helper))
    url = "https://example.com/team/repo.git"
    first = cb.credentials(url, None, CredentialType.USERPASS_PLAINTEXT)
    assert isinstance(first, pygit2.UserPass)
    assert first.credential_tuple == ("git", "tok")
    second = cb.credentials(url, None, CredentialType.USERPASS_PLAINTEXT)
    assert isinstance(second, pygit2.UserPass)
    assert second.credential_tuple == ("helper-user", "helper-pass")
    with pytest.raises(GitsessError, match=r"cannot authenticate to https://example\.com"):
        cb.credentials(url, None, CredentialType.USERPASS_PLAINTEXT)


def test_ssh_agent_then_key_files_each_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("private")
    (home / ".ssh" / "id_ed25519.pub").write_text("public")
    cb = callbacks(tmp_path, {"SSH_AUTH_SOCK": "/agent.sock", "HOME": str(home)})
    url = "ssh://git@example.com/repo.git"
    kinds = CredentialType.SSH_KEY | CredentialType.USERNAME
    assert isinstance(cb.credentials(url, None, kinds), pygit2.Username)
    assert isinstance(cb.credentials(url, "git", kinds), pygit2.KeypairFromAgent)
    key = cb.credentials(url, "git", kinds)
    assert isinstance(key, pygit2.Keypair)
    assert str(key.credential_tuple[2]).endswith("id_ed25519")
    with pytest.raises(GitsessError, match="tried user name git, the ssh agent's keys"):
        cb.credentials(url, "git", kinds)


def test_helper_commands_as_git_runs_them(tmp_path: Path) -> None:
    assert transport.helper_command("!pass git", {}) == ["sh", "-c", "pass git get"]
    assert transport.helper_command("/opt/h --x", {}) == ["sh", "-c", "/opt/h --x get"]
    fake = tmp_path / "git-credential-mine"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert transport.helper_command("mine --opt", env) == [str(fake), "--opt", "get"]
    assert transport.helper_command("absent", env) is None
    config = pygit2.Config(str(tmp_path / "config"))
    for value in ("store", "", "cache", "mine"):
        config.set_multivar("credential.helper", "a^", value)  # (a pattern nothing matches)
    assert transport.credential_helpers(config) == ["cache", "mine"]


def test_transfer_progress_draws_a_bar() -> None:
    out = io.StringIO()
    with bars(Console(file=out, force_terminal=True, width=80)) as shown:
        progress = TransferBars(shown)
        progress.received(3, 10, 2048)
        [task] = shown.tasks
        assert (task.completed, task.total) == (3, 10)
        assert task.description == "receiving objects, 2.0 KiB"
        progress.sent(1, 4, 10)
        assert len(shown.tasks) == 2 and shown.tasks[1].description == "sending objects, 10 bytes"


def test_pull_says_when_the_worktree_is_not_at_the_sessions_base(a: Machine, b: Machine) -> None:
    commit(a.path, "later.txt", "later\n")
    git_ok(a.path, "push", "-q", "origin", "main")
    a("new", "exp")
    a.write("README.md", "on the later commit\n")
    a("push", "exp")
    _, err = b("pull", "exp")
    assert "the session began at" in err and "its changes lie over that" in err
    assert b.session().base_commit == git_ok(a.path, "rev-parse", "HEAD")
    assert names(b) == ["README.md"]


def test_a_relative_remote_path_is_read_from_the_top_of_the_worktree(
    a: Machine, origin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_ok(a.path, "remote", "add", "rel", os.path.relpath(origin, a.path))
    a("new", "exp")
    monkeypatch.chdir(a.path / "src")
    out, _ = a.cli("push", "exp", "rel")
    assert "Pushed session exp to rel" in out
    assert remote_git(origin, "rev-parse", REF)


@pytest.mark.fuse
def test_push_and_pull_carry_the_commits_made_inside(a: Machine, b: Machine, origin: Path) -> None:
    a("new", "exp")
    a.run("echo one > one.txt && git add one.txt && git commit -q -m one && echo two > two.txt")
    head = a.run("git rev-parse HEAD").strip()
    a("push", "exp")
    parents = remote_git(origin, "log", "-1", "--format=%P", REF).split()
    assert parents == [git_ok(a.path, "rev-parse", "HEAD"), head]  # the base, then the commits
    assert f"Gitsess-Head: {head}" in remote_git(origin, "log", "-1", "--format=%B", REF)
    b("pull", "exp")
    assert b.json("show", "exp")["commits"] == 1
    inside = b.run("git log -1 --format=%s; git status --porcelain; cat one.txt two.txt")
    assert inside.splitlines() == ["one", "?? two.txt", "one", "two"]
    assert b.json("show", "exp")["changed_files"] == 2


@pytest.mark.parametrize("branch", ["refs/heads/main", "../main", "ma in"])
def test_a_session_commit_naming_no_valid_branch_is_refused(
    a: Machine, b: Machine, origin: Path, branch: str
) -> None:
    a("new", "exp")
    a("push", "exp")
    message = remote_git(origin, "log", "-1", "--format=%B", REF).replace(
        "Gitsess-Branch: main", f"Gitsess-Branch: {branch}"
    )
    tree = remote_git(origin, "rev-parse", f"{REF}^{{tree}}")
    base = remote_git(origin, "rev-parse", f"{REF}^1")
    forged = subprocess.run(
        ["git", "commit-tree", tree, "-p", base, "-F", "-"],
        cwd=origin, input=message, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    remote_git(origin, "update-ref", REF, forged)
    _, err = b("pull", "exp", code=1)
    assert "names no valid branch" in err
    refs = git_ok(b.path, "for-each-ref", "--format=%(refname)")
    assert "refs/heads/refs/" not in refs and "refs/heads/.." not in refs
