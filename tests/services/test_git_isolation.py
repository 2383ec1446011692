"""git inside a session is the session's own: its `.git` is copy-on-write (objects too, see
test_session_objects.py), nothing reaches the real repository until `apply`, and apply
promotes its commits."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from gitsess.services.viewwrite import _TreeOps, offline_writer
from tests.util import GITSESS, commit, git, gitsess

pytestmark = pytest.mark.fuse


def run(repo: Path, session: str, script: str) -> subprocess.CompletedProcess[str]:
    return gitsess(repo, "run", "-s", session, "--", "sh", "-c", script)


def real_state(repo: Path) -> str:
    """What nothing inside a session may change: HEAD, every ref, and the bytes of the index,
    config, HEAD, packed-refs and every hook."""
    dot = repo / ".git"
    files = [dot / "index", dot / "config", dot / "HEAD", dot / "packed-refs"]
    files += sorted((dot / "hooks").iterdir())
    digests = [
        f"{f.name}:{hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else '-'}"
        for f in files
    ]
    refs = [git(repo, "rev-parse", "HEAD"), git(repo, "for-each-ref"), git(repo, "stash", "list")]
    return "\n".join([*refs, *digests])


def fsck_clean(repo: Path) -> bool:
    done = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True)
    return done.returncode == 0 and not done.stdout


@pytest.fixture
def worked(repo: Path) -> Path:
    """The repository with a second commit, so that HEAD~1 exists inside sessions."""
    commit(repo, "second.txt", "two\n", "second")
    return repo


@pytest.mark.parametrize(
    "script",
    [
        "echo x > new.txt && git add new.txt && git commit -q -m inside",
        "git checkout -q -b topic && echo y >> README.md && git commit -q -am topic",
        "echo z >> README.md && git stash -q && git stash list | grep -q WIP",
        "git reset -q --hard HEAD~1 && test ! -e second.txt",
        "git mv README.md READ.md && git commit -q -m moved",
        "git config user.name Someone && git config core.fsmonitor true",
        "echo 'exit 1' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
        "git branch -D main 2>/dev/null; git checkout -q --detach && git branch -D main",
        "git gc -q --prune=now; git prune-packed; true",
        "rm -rf .git; test ! -e .git/HEAD",
        "git commit -q --allow-empty -m e && "
        "GIT_SEQUENCE_EDITOR='sed -i 1d' git rebase -q -i HEAD~2 && test ! -e second.txt",
        'git worktree list | grep -q "^$PWD "',
        "git tag -a v1 -m v1 && git branch other && git pack-refs --all",
    ],
)
def test_git_inside_a_session_leaves_the_real_repository_alone(worked: Path, script: str) -> None:
    before = real_state(worked)
    head = git(worked, "rev-parse", "HEAD")
    done = run(worked, "exp", script)
    assert done.returncode == 0, done.stderr
    assert real_state(worked) == before
    assert fsck_clean(worked)
    assert git(worked, "status", "--porcelain") == ""
    assert git(worked, "rev-parse", "HEAD") == head


def test_the_real_hooks_run_inside_and_change_only_the_session(worked: Path) -> None:
    hook = worked / ".git" / "hooks" / "post-commit"
    hook.write_text("#!/bin/sh\necho hooked > hooked.txt\n")
    hook.chmod(0o755)
    before = real_state(worked)
    done = run(worked, "exp", "git commit -q --allow-empty -m e && cat hooked.txt")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hooked\n"
    assert not (worked / "hooked.txt").exists()
    assert real_state(worked) == before


def test_the_state_dir_stays_reachable_inside_and_out_of_rm(worked: Path) -> None:
    done = run(worked, "exp", "ls .git; rm -rf .git")
    assert "HEAD" in done.stdout.split()
    assert "gitsess" not in done.stdout.split()  # never listed, so rm -rf never goes there
    inside = run(worked, "exp", f"{' '.join(GITSESS)} kv set k 1 && ls .git/gitsess")
    assert inside.returncode == 0, inside.stderr
    assert "sessions.db" in inside.stdout
    assert (worked / ".git" / "gitsess" / "sessions.db").is_file()


def three_commits_and_an_edit(repo: Path, session: str) -> None:
    script = "".join(
        f"echo {i} > c{i}.txt && git add c{i}.txt && "
        f"GIT_AUTHOR_NAME=Author{i} GIT_AUTHOR_EMAIL=a{i}@example.com git commit -q -m c{i} && "
        for i in (1, 2, 3)
    )
    done = run(repo, session, script + "echo edited >> README.md")
    assert done.returncode == 0, done.stderr


def test_ls_and_show_count_the_sessions_commits(worked: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    shown = gitsess(worked, "show", "exp", "--json")
    assert '"commits": 3' in shown.stdout
    listed = gitsess(worked, "ls").stdout
    assert "3 commits" in listed and " ↑3" in listed
    diff = gitsess(worked, "diff", "exp", "--name-only")
    assert diff.stdout.split() == ["README.md", "c1.txt", "c2.txt", "c3.txt"]
    assert "3 commit(s) of its own" in diff.stderr


@pytest.mark.parametrize("moved", [False, True], ids=["fast-forward", "branch moved"])
def test_apply_commit_promotes_three_commits_and_the_edit(worked: Path, moved: bool) -> None:
    three_commits_and_an_edit(worked, "exp")
    if moved:
        commit(worked, "outside.txt", "outside\n", "outside")
    done = gitsess(worked, "apply", "exp", "--commit", "-m", "the edit")
    assert done.returncode == 0, done.stderr
    log = git(worked, "log", "--format=%an|%s", "-5").splitlines()
    assert log[:4] == ["Test|the edit", "Author3|c3", "Author2|c2", "Author1|c1"]
    assert log[4] == ("Test|outside" if moved else "Test|second")
    assert git(worked, "status", "--porcelain") == ""
    assert (worked / "c3.txt").read_text() == "3\n"
    assert (worked / "README.md").read_text() == "hello\nedited\n"
    assert fsck_clean(worked)
    # The session goes on, following the real branch again.
    again = run(worked, "exp", "git log -1 --format=%s; git status --porcelain")
    assert again.stdout == "the edit\n"
    assert '"commits": 0' in gitsess(worked, "show", "exp", "--json").stdout


def test_apply_commit_refuses_a_conflicting_commit_and_changes_nothing(worked: Path) -> None:
    assert run(worked, "exp", "echo mine > README.md && git commit -q -am mine").returncode == 0
    commit(worked, "README.md", "theirs\n", "theirs")
    before = real_state(worked)
    done = gitsess(worked, "apply", "exp", "--commit", "-m", "x")
    assert done.returncode == 1
    assert "conflict: README.md" in done.stderr
    assert real_state(worked) == before
    assert (worked / "README.md").read_text() == "theirs\n"
    assert run(worked, "exp", "git log -1 --format=%s").stdout == "mine\n"


def test_apply_commit_squash_makes_one_commit(worked: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    done = gitsess(worked, "apply", "exp", "--commit", "--squash", "-m", "all of it")
    assert done.returncode == 0, done.stderr
    assert git(worked, "log", "--format=%s", "-2").splitlines() == ["all of it", "second"]
    assert git(worked, "show", "--stat", "--format=", "HEAD").count("|") == 4


def test_a_commit_undone_in_the_files_is_undone_in_the_apply(worked: Path) -> None:
    done = run(
        worked, "exp", "echo x > gone.txt && git add gone.txt && git commit -qm add; rm gone.txt"
    )
    assert done.returncode == 0, done.stderr
    assert gitsess(worked, "apply", "exp", "--commit", "-m", "remove").returncode == 0
    assert git(worked, "log", "--format=%s", "-2").splitlines() == ["remove", "add"]
    assert "gone.txt" not in git(worked, "ls-tree", "--name-only", "HEAD")
    assert git(worked, "status", "--porcelain") == ""


def test_patch_mbox_mails_each_commit_then_the_edit(worked: Path, tmp_path: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    mbox = tmp_path / "s.mbox"
    done = gitsess(worked, "apply", "exp", "--patch", "--mbox", "-m", "the edit", "-o", str(mbox))
    assert done.returncode == 0, done.stderr
    assert mbox.read_text().count("\nFrom: ") == 4
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(worked), str(clone))
    git(clone, "am", "-q", str(mbox))
    assert git(clone, "log", "--format=%an|%s", "-4").splitlines() == [
        "Test|the edit", "Author3|c3", "Author2|c2", "Author1|c1",
    ]  # fmt: skip
    assert (clone / "README.md").read_text() == "hello\nedited\n"


def test_discard_commits_keeps_their_changes_as_files(worked: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    done = gitsess(worked, "discard", "exp", "--commits", "-y")
    assert done.returncode == 0, done.stderr
    assert "Dropped 3 commit(s)" in done.stdout
    inside = run(worked, "exp", "git log -1 --format=%s; git status --porcelain; cat c2.txt")
    assert inside.stdout.splitlines() == [
        "second", " M README.md", "?? c1.txt", "?? c2.txt", "?? c3.txt", "2",
    ]  # fmt: skip


def test_apply_commit_from_inside_a_session_is_refused(worked: Path) -> None:
    cmd = " ".join(GITSESS)
    done = run(worked, "exp", f"echo x > x.txt; {cmd} apply --commit -m x")
    assert done.returncode == 1
    assert "`gitsess apply` cannot run inside a session's run" in done.stderr
    assert git(worked, "log", "-1", "--format=%s") == "second"


def linked_state(repo: Path) -> str:
    """The real state a linked worktree's session must not change: the main repository's,
    and every worktree admin dir's HEAD and index."""
    admin = sorted((repo / ".git" / "worktrees").rglob("*"))
    digests = [
        f"{p.relative_to(repo)}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        for p in admin
        if p.is_file()
    ]
    return "\n".join([real_state(repo), *digests])


def test_a_linked_worktree_session_isolates_git_too(worked: Path) -> None:
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    assert made.returncode == 0, made.stderr
    tree = Path(json.loads(made.stdout)["worktree"])
    before = linked_state(worked)
    script = (
        "test -f .git && test -f .GIT/worktrees/gitsess-lw/commondir && "
        "echo n > n.txt && git add n.txt && git commit -q -m in-linked && "
        "git checkout -q -b side && git stash list && git config user.name Other"
    )
    done = gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert linked_state(worked) == before
    assert fsck_clean(worked)
    assert (tree / ".git").is_file()  # the real one stays a gitdir file
    assert '"commits": 1' in gitsess(tree, "show", "lw", "--json").stdout
    # its git is on `side`, made inside: that needs saying where the commits go
    refused = gitsess(tree, "apply", "lw", "--commit", "-m", "rest")
    assert refused.returncode == 1 and "give --branch" in refused.stderr
    applied = gitsess(tree, "apply", "lw", "--commit", "--branch", "gitsess/lw", "-m", "rest")
    assert applied.returncode == 0, applied.stderr
    assert git(tree, "log", "-1", "--format=%s") == "in-linked"
    assert git(worked, "log", "-1", "--format=%s") == "second"  # main did not move
    assert git(tree, "status", "--porcelain") == ""


def test_a_linked_worktree_session_mounted_elsewhere_is_its_git_too(
    worked: Path, tmp_path: Path
) -> None:
    """At a mount point of its own, a linked worktree's view leads git to its own git dirs
    (`.git` a file naming `.GIT/worktrees/<id>` there), where git takes it for the current
    worktree; what is written there, by git or by hand, is the session's."""
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    assert made.returncode == 0, made.stderr
    tree = Path(json.loads(made.stdout)["worktree"])
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(tree, "mount", "lw", str(view)).returncode == 0
    before = linked_state(worked)
    try:
        assert git(view, "rev-parse", "--git-dir") == f"{view}/.GIT/worktrees/gitsess-lw"
        git(view, "switch", "-q", "-c", "side")
        git(view, "switch", "-q", "gitsess/lw")  # not "checked out at" another worktree
        (view / "n.txt").write_text("n\n")
        git(view, "add", "n.txt")
        git(view, "commit", "-q", "-m", "in-view")
        (view / ".GIT" / "worktrees" / "gitsess-lw" / "config.worktree").write_text("x\n")
        (view / ".GIT" / "planted").write_text("x\n")
        assert linked_state(worked) == before and fsck_clean(worked)
        assert not (worked / ".git" / "planted").exists()
        assert git(tree, "log", "-1", "--format=%s") == "second"
    finally:
        assert gitsess(tree, "umount", "lw").returncode == 0
    inside = run(tree, "lw", "git log -1 --format=%s; cat .GIT/planted")
    assert inside.stdout == "in-view\nx\n", inside.stderr


def _old_layout(session_dir: Path, tree: Path, branch_tip: str) -> None:
    """The delta of a linked worktree's session from before git's layout: `.git` a directory
    (the admin dir) holding the common dir as `common`, here with HEAD on a branch `side` of
    the session's own."""
    with offline_writer(session_dir, tree, ()) as writer:
        ops = writer.ops
        assert isinstance(ops, _TreeOps)
        ops.unlink(".git")
        for d in (".git", ".git/common", ".git/common/refs", ".git/common/refs/heads"):
            ops.mkdir(d, 0o755)
            n = ops.tree.resolve(d.encode())
            assert n is not None
            n.origin = d.encode()  # merged with the admin dir and the common dir, as made then
            ops.tree.table.pending.nodes.add(n.ino)
        ops.write_file(".git/HEAD", [b"ref: refs/heads/side\n"], 0o644)
        ops.write_file(".git/common/refs/heads/side", [branch_tip.encode() + b"\n"], 0o644)


def test_a_linked_worktree_session_of_the_layout_before_is_moved_to_gits(worked: Path) -> None:
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    tree = Path(info["worktree"])
    tip = git(worked, "rev-parse", "HEAD")
    _old_layout(worked / ".git" / "gitsess" / "sessions" / info["id"], tree, tip)
    script = "git rev-parse --abbrev-ref HEAD; git rev-parse side; git status --porcelain; cat .git"
    done = run(tree, "lw", script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["side", tip] and lines[2].endswith("/.GIT/worktrees/gitsess-lw")
    assert git(worked, "rev-parse", "--verify", "-q", "refs/heads/side", check=False) == ""


@pytest.mark.parametrize("extra", [(), ("--read-only",)], ids=["writable", "read-only"])
def test_a_linked_worktree_run_reaches_the_real_common_dir_only_copy_on_write(
    worked: Path, extra: tuple[str, ...]
) -> None:
    """At the real common dir's path a run of a linked worktree finds the view's, where git
    there finds its common dir too: what the run writes there is the session's (or refused,
    read-only), and it cannot unmount it."""
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    assert made.returncode == 0, made.stderr
    tree = Path(json.loads(made.stdout)["worktree"])
    before = linked_state(worked)
    dot = worked.resolve() / ".git"
    script = (
        f"git rev-parse --git-common-dir; umount -l {dot} 2>/dev/null && echo unmounted;"
        f" echo x > {dot}/planted; rm -f {dot}/HEAD {dot}/config;"
        f" echo junk > {dot}/worktrees/gitsess-lw/HEAD; rm -rf {dot}/worktrees;"
        f" rm -rf {dot}/refs {dot}/objects; true"
    )
    done = gitsess(tree, "run", "-s", "lw", *extra, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{dot}\n"
    assert linked_state(worked) == before and fsck_clean(worked)
    assert not (dot / "planted").exists() and (dot / "HEAD").is_file()
    after = gitsess(
        tree, "run", "-s", "lw", "--", "sh", "-c", f"ls {dot}/planted && ! ls {dot}/HEAD"
    )
    assert (after.returncode == 0) == (extra == ()), after.stderr


@pytest.mark.parametrize("away", ["mv .GIT .GIT-old", "mv .GIT .GIT-old && ln -s {dot} .GIT"])
def test_a_linked_worktree_run_without_its_common_dir_cannot_write_the_real_one(
    worked: Path, away: str
) -> None:
    """Once the session moved its common dir away (or put a symlink to the real one in its
    place), the view has none to bind over the real one: the real one is sealed read-only."""
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    assert made.returncode == 0, made.stderr
    tree = Path(json.loads(made.stdout)["worktree"])
    dot = worked.resolve() / ".git"
    gone = gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", away.format(dot=dot))
    assert gone.returncode == 0, gone.stderr
    before = linked_state(worked)
    script = f"echo x > {dot}/planted; rm -rf {dot}/refs {dot}/objects; umount -l {dot}; true"
    done = gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    assert linked_state(worked) == before and fsck_clean(worked)
    assert not (dot / "planted").exists()


def test_rm_archives_the_sessions_commits_too(worked: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    head = run(worked, "exp", "git rev-parse HEAD").stdout.strip()
    done = gitsess(worked, "rm", "exp")
    assert done.returncode == 0, done.stderr
    archive = git(worked, "for-each-ref", "--format=%(refname)", "refs/gitsess/archive/")
    parents = git(worked, "log", "-1", "--format=%P", archive).split()
    assert parents == [git(worked, "rev-parse", "HEAD"), head]
    assert git(worked, "log", "--format=%s", "-3", head).splitlines() == ["c3", "c2", "c1"]
    restored = gitsess(worked, "restore", "exp")
    assert restored.returncode == 0, restored.stderr
    assert run(worked, "exp", "cat c3.txt README.md").stdout == "3\nhello\nedited\n"


def test_fork_carries_the_sessions_commits(worked: Path) -> None:
    three_commits_and_an_edit(worked, "exp")
    assert gitsess(worked, "fork", "exp", "copy").returncode == 0
    assert run(worked, "copy", "git log --format=%s -1").stdout == "c3\n"
    assert '"commits": 3' in gitsess(worked, "show", "copy", "--json").stdout


@pytest.mark.parametrize("moved", [False, True], ids=["fast-forward", "branch moved"])
def test_a_committed_file_replaced_by_a_rename_applies(worked: Path, moved: bool) -> None:
    """`sed -i` renames a new file over the old one: the real file is still the branch's,
    and the worktree check must compare it with the branch, not with the replayed commits."""
    done = run(
        worked, "exp", "sed -i s/hello/bye/ README.md && git commit -q -am bye && echo n > n"
    )
    assert done.returncode == 0, done.stderr
    if moved:
        commit(worked, "outside.txt", "outside\n", "outside")
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "n")
    assert applied.returncode == 0, applied.stderr
    assert (worked / "README.md").read_text() == "bye\n"
    assert git(worked, "log", "--format=%s", "-2").splitlines() == ["n", "bye"]
    assert git(worked, "status", "--porcelain") == ""


def test_rm_after_apply_commit_keeps_a_branch_holding_the_only_copy(worked: Path) -> None:
    made = gitsess(worked, "new", "lw", "--worktree", "--json")
    tree = Path(json.loads(made.stdout)["worktree"])
    done = gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", "echo n > n.txt")
    assert done.returncode == 0, done.stderr
    assert gitsess(tree, "apply", "lw", "--commit", "-m", "only here").returncode == 0
    commit_id = git(tree, "rev-parse", "HEAD")
    removed = gitsess(worked, "rm", "lw")
    assert removed.returncode == 0, removed.stderr
    assert git(worked, "rev-parse", "gitsess/lw") == commit_id  # the branch stays
    assert "on no other branch" in removed.stdout + removed.stderr


@pytest.fixture
def moved_under(worked: Path) -> Path:
    """A session edits line 1 of f.txt; then the branch changes line 3 (a commit outside)."""
    commit(worked, "f.txt", "a\nb\nc\n", "f")
    assert run(worked, "exp", "printf 'A\\nb\\nc\\n' > f.txt").returncode == 0
    commit(worked, "f.txt", "a\nb\nC\n", "outside")
    return worked


def test_diff_and_patch_keep_what_the_branch_got_since(moved_under: Path, tmp_path: Path) -> None:
    diff = gitsess(moved_under, "diff", "exp")
    assert diff.returncode == 0, diff.stderr
    assert "-a\n+A\n b\n C\n" in diff.stdout  # C stays: no "-C", no "+c"
    assert "-C" not in diff.stdout and "+c" not in diff.stdout
    patch = tmp_path / "p.patch"
    assert gitsess(moved_under, "apply", "exp", "--patch", "-o", str(patch)).returncode == 0
    git(moved_under, "apply", str(patch))
    assert (moved_under / "f.txt").read_text() == "A\nb\nC\n"


def test_apply_worktree_merges_onto_what_the_branch_got_since(moved_under: Path) -> None:
    done = gitsess(moved_under, "apply", "exp", "--worktree")
    assert done.returncode == 0, done.stderr
    assert (moved_under / "f.txt").read_text() == "A\nb\nC\n"


def test_apply_worktree_conflicting_with_the_branch_changes_nothing(worked: Path) -> None:
    commit(worked, "f.txt", "a\nb\nc\n", "f")
    assert run(worked, "exp", "printf 'A\\nb\\nc\\n' > f.txt").returncode == 0
    commit(worked, "f.txt", "Z\nb\nc\n", "outside")
    for args in (("--worktree",), ("--patch",)):
        done = gitsess(worked, "apply", "exp", *args)
        assert done.returncode == 1
        assert "conflict: f.txt" in done.stderr
    assert (worked / "f.txt").read_text() == "Z\nb\nc\n"
