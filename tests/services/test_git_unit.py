"""One consistent git state in a session (HEAD, index and branch ref as one unit), and applies
that never drop a commit (issue 36, items 5-14 and 16)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.services.test_git_isolation import fsck_clean, real_state, run
from tests.util import GITSESS, commit, git, gitsess

pytestmark = pytest.mark.fuse


@pytest.fixture
def worked(repo: Path) -> Path:
    commit(repo, "second.txt", "two\n", "second")
    return repo


def show(repo: Path, session: str = "exp") -> str:
    done = gitsess(repo, "show", session)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


# ---------------------------------------------------------------------------------------------
# 5: HEAD, the index and the branch's ref are one unit


def test_a_session_commit_never_reverts_a_commit_made_outside(worked: Path) -> None:
    ok(run(worked, "exp", "git status >/dev/null"))  # the index is the session's from here
    commit(worked, "a.txt", "1\n", "outside")
    ok(run(worked, "exp", "echo s > s.txt && git add s.txt && git commit -q -m inside"))
    inside = ok(run(worked, "exp", "git show --name-status --format=%s HEAD; git log --format=%s"))
    assert inside.stdout.split() == ["inside", "A", "s.txt", "inside", "second", "initial"]
    assert any(
        line.startswith("behind") and "1 commit" in line for line in show(worked).splitlines()
    )
    ok(gitsess(worked, "apply", "exp", "--commit", "-m", "rest"))
    assert git(worked, "log", "--format=%s", "-3").splitlines() == ["inside", "outside", "second"]
    assert (worked / "a.txt").read_text() == "1\n"
    assert git(worked, "status", "--porcelain") == ""


def test_a_real_gits_index_lock_does_not_stop_a_git_inside_a_following_session(
    worked: Path,
) -> None:
    """The unit follows the real repository (as after an apply) while a real git holds its
    `index.lock`: a git inside takes the unit as its own and commits; the real lock stays."""
    lock = worked / ".git" / "index.lock"
    lock.write_bytes(b"held by a real git\n")
    made = run(worked, "exp", "echo s > s.txt && git add s.txt && git commit -qm inside")
    assert made.returncode == 0, made.stderr
    assert lock.read_bytes() == b"held by a real git\n"
    assert git(worked, "log", "-1", "--format=%s") == "second"
    lock.unlink()
    inside = ok(run(worked, "exp", "git log -1 --format=%s && git status --porcelain"))
    assert inside.stdout == "inside\n"


def test_a_session_that_only_read_git_follows_the_real_branch(worked: Path) -> None:
    ok(run(worked, "exp", "git log -1 >/dev/null"))
    commit(worked, "a.txt", "1\n", "outside")
    inside = ok(run(worked, "exp", "git log -1 --format=%s; git status --porcelain"))
    assert inside.stdout == "outside\n"


def test_checking_out_another_branch_takes_its_ref_along(worked: Path) -> None:
    git(worked, "branch", "other")
    ok(run(worked, "exp", "git checkout -q other"))
    commit_on_other = git(worked, "commit-tree", "-p", "other", "-m", "o", "HEAD^{tree}")
    git(worked, "update-ref", "refs/heads/other", commit_on_other)
    # the session's index is of `other` as it was: its HEAD must be too
    inside = ok(run(worked, "exp", "git rev-parse HEAD; git status --porcelain"))
    assert inside.stdout.split() == [git(worked, "rev-parse", "main")]


def test_a_checkout_after_a_gc_inside_keeps_the_sessions_branch(worked: Path) -> None:
    """`git gc` inside packs the session's refs (its loose branch ref goes, the real one stays
    hidden); a checkout of the branch then renames HEAD in: the branch stays where the session
    has it, not at a real commit made meanwhile (found by the interleaved model check)."""
    ok(run(worked, "exp", "git update-ref refs/heads/main HEAD"))  # the unit the session's own
    commit(worked, "a.txt", "1\n", "outside")
    ok(run(worked, "exp", "git gc -q && echo x > README.md && git checkout -q main"))
    time.sleep(1.5)  # (the kernel's cached names below `.git/refs` expire: what git then reads)
    inside = ok(run(worked, "exp", "git log --format=%s main"))
    assert inside.stdout.split() == ["second", "initial"]
    assert git(worked, "log", "-1", "--format=%s") == "outside"


def test_the_reflogs_are_the_sessions_own_with_the_unit(worked: Path) -> None:
    """Once HEAD, the index and the branch are the session's own, a commit made outside is not
    in the session's reflogs either (as in a clone): listed there, `git prune` inside kept its
    objects or not depending on when it read them, and `git fsck` then found them missing."""
    ok(run(worked, "exp", "git update-ref refs/heads/main HEAD"))
    outside = commit(worked, "out.txt", "outside\n", "outside")
    logs = ok(run(worked, "exp", "git reflog show --format=%H main; git reflog --format=%H"))
    assert outside not in logs.stdout
    ok(run(worked, "exp", "echo s > s.txt && git add s.txt && git commit -qm inside && git prune"))
    fsck = run(worked, "exp", "git fsck --no-dangling --no-progress")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "inside" in ok(run(worked, "exp", "git reflog -1 --format=%s main")).stdout


# ---------------------------------------------------------------------------------------------
# 6: the session's own commits, and a session on another branch


def test_a_real_branch_checked_out_inside_is_not_the_sessions_own(worked: Path) -> None:
    git(worked, "checkout", "-q", "-b", "other")
    commit(worked, "o.txt", "o\n", "not for main")
    git(worked, "checkout", "-q", "main")
    ok(run(worked, "exp", "git checkout -q other"))
    assert '"commits": 0' in gitsess(worked, "show", "exp", "--json").stdout
    assert "other, not the session's branch" in show(worked)


def test_apply_refuses_a_session_on_another_branch_unless_told(worked: Path) -> None:
    ok(run(worked, "exp", "git checkout -q -b feature && echo f > f.txt && git add f.txt "
           "&& git commit -q -m feat"))  # fmt: skip
    before = real_state(worked)
    done = gitsess(worked, "apply", "exp", "--commit", "-m", "x")
    assert done.returncode == 1
    assert "give --branch" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert real_state(worked) == before
    ok(gitsess(worked, "apply", "exp", "--commit", "--branch", "main", "-m", "x"))
    assert git(worked, "log", "--format=%s", "-1", "main") == "feat"
    # the branch made inside is still there
    inside = ok(run(worked, "exp", "git rev-parse --abbrev-ref HEAD; git log -1 --format=%s"))
    assert inside.stdout.split() == ["feature", "feat"]


# ---------------------------------------------------------------------------------------------
# 7: merges, and a reset below the base


def test_a_merge_made_inside_is_replayed(worked: Path) -> None:
    script = (
        "git checkout -q -b side && echo s > side.txt && git add side.txt && git commit -qm side"
        " && git checkout -q main && echo m > m.txt && git add m.txt && git commit -qm m"
        " && git merge -q --no-edit side"
    )
    ok(run(worked, "exp", script))
    commit(worked, "outside.txt", "o\n", "outside")
    ok(gitsess(worked, "apply", "exp", "--commit", "-m", "rest"))
    assert git(worked, "log", "--first-parent", "--format=%s", "-3").splitlines()[1:] == [
        "m", "outside",
    ]  # fmt: skip
    assert git(worked, "rev-list", "--merges", "--count", "HEAD~1..HEAD") == "1"
    for name in ("side.txt", "m.txt", "outside.txt"):
        assert (worked / name).exists()
    assert git(worked, "status", "--porcelain") == ""
    assert fsck_clean(worked)


def test_a_reset_below_the_base_is_said(worked: Path) -> None:
    ok(run(worked, "exp", "git reset -q --hard HEAD~1"))
    assert "1 commit(s) below its base" in show(worked)
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "undo second"))
    assert "below its base" in done.stderr + done.stdout
    assert not (worked / "second.txt").exists()


# ---------------------------------------------------------------------------------------------
# 8: the same answer inside a session and outside


def test_show_ls_and_mbox_inside_a_session_say_what_they_cannot_know(worked: Path) -> None:
    ok(run(worked, "exp", "echo 1 > c1.txt && git add c1.txt && git commit -q -m c1"))
    commit(worked, "a.txt", "1\n", "outside")
    cmd = " ".join(GITSESS)
    outside = json.loads(ok(gitsess(worked, "show", "exp", "--json")).stdout)
    assert (outside["changed_files"], outside["commits"], outside["behind"]) == (1, 1, 1)
    assert len(outside["own_commits"]) == 1 and not outside["out_of_reach"]
    # Inside a run the worktree's path shows the view and its `.git` is the session's: the real
    # files and branch are out of reach, so what compares with them is unknown there, and said
    # so (null, "?" and a note), never counted against the view (which gave 0 changes, no
    # commits and a wrong "behind").
    inside = json.loads(ok(run(worked, "exp", f"{cmd} show exp --json")).stdout)
    assert inside["out_of_reach"] and inside["own_commits"] is None
    assert (inside["changed_files"], inside["commits"], inside["behind"]) == (None, None, None)
    assert {k: v for k, v in inside.items() if k in ("id", "name", "branch", "base_commit")} == {
        k: v for k, v in outside.items() if k in ("id", "name", "branch", "base_commit")
    }
    text = ok(run(worked, "exp", f"{cmd} show exp; {cmd} ls")).stdout
    for key in ("changes", "behind", "commits"):
        assert any(line.split() == [key, "?"] for line in text.splitlines()), text
    assert text.count("out of reach") == 2
    # `apply --patch --mbox` needs the session's commits and the real worktree: refused in
    # one line inside, as every apply is; outside it writes the commit's mail and the rest.
    refused = run(worked, "exp", f"{cmd} apply --patch --mbox -m m")
    assert refused.returncode != 0 and "cannot run inside a session's run" in refused.stderr
    assert refused.stderr.count("\n") == 1 and not refused.stdout
    mails = ok(gitsess(worked, "apply", "exp", "--patch", "--mbox", "-m", "m")).stdout
    assert mails.count("\nFrom: ") + mails.startswith("From: ") == 1


# ---------------------------------------------------------------------------------------------
# 9: a --worktree session's own branch is not "checked out elsewhere"


def test_a_worktree_session_switches_back_to_and_rebases_its_own_branch(
    worked: Path, tmp_path: Path
) -> None:
    made = ok(gitsess(worked, "new", "lw", "--worktree", "--json"))
    tree = Path(json.loads(made.stdout)["worktree"])
    # (a branch named to `rebase` is refused when git finds it checked out at another worktree)
    script = (
        "git switch -q -c side && git switch -q {branch} && git rebase -q main {branch}"
        " && git rev-parse --abbrev-ref HEAD && git branch --show-current"
    )
    inside = script.format(branch="gitsess/lw")
    done = ok(gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", inside))
    # as in a real linked worktree of the same repository
    real = tmp_path / "real-lw"
    git(worked, "worktree", "add", "-q", "-b", "topic", str(real))
    want = subprocess.run(
        ["sh", "-c", script.format(branch="topic")], cwd=real, capture_output=True, text=True
    )
    assert want.returncode == 0, want.stderr
    assert done.stdout == want.stdout.replace("topic", "gitsess/lw") == "gitsess/lw\ngitsess/lw\n"


def worktree_lists(repo: Path, tmp_path: Path) -> tuple[Path, str, str]:
    """A `--worktree` session's worktree beside another linked worktree, and `git worktree
    list --porcelain` there, outside and inside a run."""
    git(repo, "worktree", "add", "-q", "-b", "other", str(tmp_path / "other"))
    made = ok(gitsess(repo, "new", "lw", "--worktree", "--json"))
    tree = Path(json.loads(made.stdout)["worktree"])
    want = git(tree, "worktree", "list", "--porcelain")
    done = ok(gitsess(tree, "run", "-s", "lw", "--", "git", "worktree", "list", "--porcelain"))
    return tree, want, done.stdout.strip()


def test_worktree_list_in_a_worktree_session_is_the_real_ones(worked: Path, tmp_path: Path) -> None:
    """The main worktree by its real path (not the view's common dir), the other linked one,
    and the session's own, as the current one (git takes it so only at its git dir's real
    path, `<common>/worktrees/<id>`: else `git switch` to its branch refuses, above)."""
    tree, want, inside = worktree_lists(worked, tmp_path)
    blocks = want.split("\n\n")
    assert blocks[0].startswith(f"worktree {worked.resolve()}\nHEAD ")
    assert len(blocks) == 3 and any(b.startswith(f"worktree {tree}\n") for b in blocks)
    assert inside == want


# ---------------------------------------------------------------------------------------------
# 10: a `.git` removed inside comes back with discard


def test_discard_commits_after_rm_rf_git_brings_the_branch_back(worked: Path) -> None:
    ok(run(worked, "exp", "echo x > x.txt; rm -rf .git; true"))
    ok(gitsess(worked, "discard", "exp", "--commits"))
    inside = ok(run(worked, "exp", "git log -1 --format=%s; git status --porcelain"))
    assert inside.stdout.splitlines() == ["second", "?? x.txt"]
    ok(gitsess(worked, "apply", "exp", "--commit", "-m", "x"))
    assert git(worked, "log", "-1", "--format=%s") == "x"


def test_discard_of_git_brings_the_branch_back(worked: Path) -> None:
    ok(run(worked, "exp", "echo x > x.txt; rm -rf .git; true"))
    done = ok(gitsess(worked, "discard", "exp", "-y", "--", ".git"))
    assert "Nothing to discard" not in done.stderr
    inside = ok(run(worked, "exp", "git log -1 --format=%s; git status --porcelain"))
    assert inside.stdout.splitlines() == ["second", "?? x.txt"]


@pytest.mark.parametrize("how", [("-y", "--", ".git"), ("--commits",)], ids=["git", "commits"])
def test_discard_brings_a_worktree_sessions_git_back(worked: Path, how: tuple[str, ...]) -> None:
    """In a `--worktree` session `.git` is a file and `.GIT` the common dir: `.git` named to
    discard, or a broken git state whose commits are discarded, is the whole git state."""
    made = ok(gitsess(worked, "new", "lw", "--worktree", "--json"))
    tree = Path(json.loads(made.stdout)["worktree"])
    script = "echo x > x.txt; rm -rf .git .GIT; git status 2>/dev/null || echo gone"
    assert ok(gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", script)).stdout == "gone\n"
    done = ok(gitsess(tree, "discard", "lw", *how))
    assert "Nothing to discard" not in done.stderr
    script = "git log -1 --format=%s; git status --porcelain"
    inside = ok(gitsess(tree, "run", "-s", "lw", "--", "sh", "-c", script))
    assert inside.stdout.splitlines() == ["second", "?? x.txt"]


# ---------------------------------------------------------------------------------------------
# 11: a commit made during an apply is never dropped


def _commit_loop(repo: Path, stop: threading.Event, made: list[str]) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        (repo / "loop.txt").write_text(f"{i}\n")
        done = subprocess.run(
            ["git", "commit", "-q", "-m", f"loop {i}", "--", "loop.txt"],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode == 0:
            made.append(git(repo, "rev-parse", "HEAD"))
        else:  # the branch's lock is held by the apply: as against any other git, try again
            subprocess.run(["git", "add", "loop.txt"], cwd=repo, capture_output=True)
        # a pause now and then: an apply that always finds the branch moved refuses each time
        stop.wait(0.05 * (i % 4))


def _race(repo: Path, view: Path, rounds: int) -> None:
    (repo / "loop.txt").write_text("0\n")
    git(repo, "add", "loop.txt")
    git(repo, "commit", "-q", "-m", "loop 0")
    ok(gitsess(repo, "new", "exp"))
    view.mkdir()
    ok(gitsess(repo, "mount", "exp", str(view)))
    # its git its own before the loop starts: a real `index.lock` is then not the session's
    git(view, "update-ref", "refs/heads/main", "HEAD")
    stop = threading.Event()
    made: list[str] = []
    loop = threading.Thread(target=_commit_loop, args=(repo, stop, made))
    loop.start()
    applied = 0
    try:
        for i in range(rounds):
            # a commit of the session's (replayed onto the tip) and a change on top of it
            (view / f"f{i}.txt").write_text(f"{i}\n")
            git(view, "add", f"f{i}.txt")
            git(view, "commit", "-q", "-m", f"session {i}")
            (view / f"g{i}.txt").write_text(f"{i}\n")
            done = gitsess(repo, "apply", "exp", "--commit", "-m", f"apply {i}")
            assert done.returncode in (0, 1), done.stderr
            applied += done.returncode == 0
    finally:
        stop.set()
        loop.join()
        gitsess(repo, "umount", "exp")
    on_branch = set(git(repo, "rev-list", "main").split())
    assert made and set(made) <= on_branch
    # the reflog: every tip the branch had is still in its history
    assert set(git(repo, "reflog", "--format=%H", "main").split()) <= on_branch
    assert applied > 0
    assert fsck_clean(repo)


@pytest.mark.timeout(600)
def test_apply_commit_against_an_outside_commit_loop(worked: Path, tmp_path: Path) -> None:
    _race(worked, tmp_path / "view", 10)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_apply_commit_against_an_outside_commit_loop_200_rounds(
    worked: Path, tmp_path: Path
) -> None:
    _race(worked, tmp_path / "view", 200)


# ---------------------------------------------------------------------------------------------
# 12, 13: the real index after an apply, and an apply that cannot take it


def test_apply_worktree_then_commit_leaves_the_real_index_right(worked: Path) -> None:
    ok(run(worked, "exp", "echo c > c.txt && git add c.txt && git commit -q -m c"))
    ok(gitsess(worked, "apply", "exp", "--worktree"))
    ok(gitsess(worked, "apply", "exp", "--commit", "-m", "x"))
    assert git(worked, "status", "--porcelain") == ""
    assert "c.txt" in git(worked, "ls-files")


def test_a_held_index_lock_stops_the_apply_before_any_write(worked: Path) -> None:
    ok(run(worked, "exp", "echo new > new.txt && echo more >> README.md"))
    lock = worked / ".git" / "index.lock"
    lock.write_text("")
    before = real_state(worked)
    done = gitsess(worked, "apply", "exp", "--commit", "-m", "x")
    assert done.returncode == 1
    assert "index.lock" in done.stderr
    assert not (worked / "new.txt").exists()
    assert (worked / "README.md").read_text() == "hello\n"
    assert real_state(worked) == before
    lock.unlink()
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "x"))
    assert (worked / "new.txt").read_text() == "new\n"
    assert git(worked, "status", "--porcelain") == ""


# ---------------------------------------------------------------------------------------------
# 14: commits that reached the branch by another route


def test_commits_merged_outside_are_not_a_conflict(worked: Path, tmp_path: Path) -> None:
    ok(run(worked, "exp", "echo a > README.md && git commit -q -am one"))
    ok(run(worked, "exp", "echo b > README.md"))  # edited again after the commit
    bundle = tmp_path / "s.bundle"  # its objects are the session's: carried out by a bundle
    ok(run(worked, "exp", f"git bundle create -q {bundle} HEAD"))
    git(worked, "fetch", "-q", str(bundle), "HEAD")
    git(worked, "merge", "-q", "--ff-only", "FETCH_HEAD")
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "two"))
    assert "conflict" not in done.stderr
    assert git(worked, "log", "--format=%s", "-2").splitlines() == ["two", "one"]
    assert (worked / "README.md").read_text() == "b\n"


def test_a_forks_applied_commits_are_not_a_conflict(worked: Path) -> None:
    ok(run(worked, "exp", "echo a > README.md && git commit -q -am one"))
    ok(gitsess(worked, "fork", "exp", "fk"))
    ok(gitsess(worked, "apply", "fk", "--commit", "-m", "fork"))
    ok(run(worked, "exp", "echo b > README.md"))
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "rest"))
    assert "conflict" not in done.stderr
    assert git(worked, "log", "--format=%s", "-2").splitlines() == ["rest", "one"]
    assert (worked / "README.md").read_text() == "b\n"


def test_rm_of_a_session_whose_git_state_is_broken_keeps_its_files(worked: Path) -> None:
    """Its branch names a commit it does not hold (a hostile or broken git inside): `rm` says
    so in one line and removes nothing; `rm --force` archives its files without commits."""
    missing = "1" * 40
    ok(run(worked, "exp", f"echo kept > kept.txt && echo {missing} > .git/refs/heads/main"))
    refused = gitsess(worked, "rm", "exp")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "git state cannot be read" in refused.stderr and "--force" in refused.stderr
    assert "exp" in ok(gitsess(worked, "ls")).stdout
    done = ok(gitsess(worked, "rm", "exp", "--force"))
    assert "its commits are not kept" in done.stderr
    assert git(worked, "show", "refs/gitsess/archive/exp:kept.txt") == "kept"
    assert "exp" not in ok(gitsess(worked, "ls")).stdout


# ---------------------------------------------------------------------------------------------
# 16: messages say what was made


def test_apply_says_what_it_made(worked: Path) -> None:
    ok(run(worked, "exp", "echo c > c.txt && git add c.txt && git commit -q -m c && echo e > e"))
    # a dry run says the same (it said "Would commit 2 path(s)", as if the commit were new)
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "x", "--dry-run"))
    assert "Would make a new commit with 1 path on main on top of them" in done.stdout
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "x"))
    assert "1 commit fast-forwarded, 1 new commit with 1 path" in done.stdout
    ok(run(worked, "exp", "echo d > d.txt && git add d.txt && git commit -q -m d"))
    commit(worked, "o.txt", "o\n", "outside")
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "y", "--dry-run"))
    assert "Would make no new commit on main on top of them" in done.stdout
    done = ok(gitsess(worked, "apply", "exp", "--commit", "-m", "y"))
    assert "1 commit replayed, no new commit" in done.stdout


def test_ls_does_not_count_touched_but_unchanged_paths(worked: Path) -> None:
    ok(run(worked, "exp", "cp README.md r && mv r README.md && touch second.txt"))
    assert " none " in gitsess(worked, "ls").stdout.splitlines()[-1]
