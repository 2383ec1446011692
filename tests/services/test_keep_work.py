"""gc and the hooks never lose work and never waste a start: an archive a gc run makes
survives that run, "merged" comes from the graph, the hooks do nothing (and start nothing)
inside a session, and say once when they cannot run gitsess at all."""

from __future__ import annotations

import os
import re
import subprocess
from datetime import timedelta
from pathlib import Path

from gitsess.git.repo import discover
from gitsess.services import sessions
from gitsess.services.viewwrite import view_writer
from gitsess.store.registry import Registry
from tests.sweep_util import archives, session, sessions_of
from tests.util import commit, git, gitsess


def ok(cwd: Path, *args: str) -> str:
    done = gitsess(cwd, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


def write(repo: Path, name: str, rel: str, text: str) -> None:
    """Into the session's view, without mounting it."""
    ctx = discover(repo)
    s = sessions.resolve(ctx, name)
    with view_writer(ctx, s, s.worktree) as writer:
        writer.put_file(rel, (text.encode(),), 0o644)


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()]


def test_an_archive_made_by_gc_survives_that_run_whatever_the_max_age(repo: Path) -> None:
    ok(repo, "new", "doomed", "--worktree")
    write(repo, "doomed", "work.txt", "unapplied work\n")
    git(session(repo, "doomed").worktree, "checkout", "-q", "--detach")
    git(repo, "branch", "-D", "gitsess/doomed")
    git(repo, "config", "gitsess.gc.archiveMaxAge", "0")

    dry = _lines(ok(repo, "gc", "--dry-run"))
    done = ok(repo, "gc")
    assert "refs/gitsess/archive/doomed" in done
    assert archives(repo) == ["refs/gitsess/archive/doomed"]
    assert git(repo, "show", "refs/gitsess/archive/doomed:work.txt") == "unapplied work"
    # the dry run listed exactly what the run did (one line per action, same order)
    did = [line for line in _lines(done) if not line.startswith(("gitsess:", " "))]
    assert [re.sub(r"^Would (\w+)", r"\1", line) for line in dry] == [
        re.sub(r"^(Removed|Deleted)", lambda m: m.group(1)[:-1].lower(), line) for line in did
    ]
    # the next run is another run: the archive is old enough now
    done = ok(repo, "gc")
    assert "Deleted archive refs/gitsess/archive/doomed" in done and archives(repo) == []


def test_a_merge_is_seen_when_new_and_apply_fall_in_one_second(repo: Path) -> None:
    ok(repo, "new", "quick", "--worktree")
    write(repo, "quick", "feature.txt", "done\n")
    ok(repo, "apply", "quick", "--commit", "-m", "feature")
    # as if `new` and `apply` fell in the same second: the session's creation time (fractional)
    # after the commit's (whole seconds)
    s = session(repo, "quick")
    registry = Registry.open(discover(repo).registry_path, create=False)
    assert registry is not None
    try:
        registry.update(s.id, created_at=(s.created_at + timedelta(seconds=5)).isoformat())
    finally:
        registry.close()
    git(repo, "merge", "-q", "--ff-only", "gitsess/quick")
    done = ok(repo, "gc")
    assert "Removed session quick" in done and "merged into main" in done
    assert "quick" not in sessions_of(repo)


def test_a_branch_with_nothing_of_its_own_is_not_merged(repo: Path) -> None:
    ok(repo, "new", "fresh", "--worktree")
    commit(repo, "later.txt", "main moved on\n")
    ok(repo, "gc")
    assert "fresh" in sessions_of(repo)


def _install(repo: Path, command: str) -> None:
    ok(repo, "hooks", "install", "--command", command)


def test_hooks_start_nothing_inside_a_session(repo: Path, tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    recorder = tmp_path / "recorder"
    recorder.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    recorder.chmod(0o755)
    ok(repo, "new", "exp")  # a registry: the hooks go on to start gitsess
    _install(repo, str(recorder))
    inside = {**os.environ, "GITSESS_SESSION_ID": session(repo, "exp").id}
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "in"], cwd=repo, env=inside,
                   check=True)  # fmt: skip
    subprocess.run(["git", "checkout", "-q", "-b", "other"], cwd=repo, env=inside, check=True)
    assert not calls.exists()
    git(repo, "commit", "-q", "--allow-empty", "-m", "outside")
    assert calls.read_text().startswith("hook post-commit")


def test_hooks_say_once_that_gitsess_is_missing(repo: Path, tmp_path: Path) -> None:
    user_hook = repo / ".git" / "hooks" / "post-checkout"
    user_hook.write_text("#!/bin/sh\nexit 0\n")
    user_hook.chmod(0o755)
    ok(repo, "new", "exp")
    _install(repo, str(tmp_path / "gone" / "gitsess"))
    done = subprocess.run(["git", "checkout", "-q", "-b", "side"], cwd=repo, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert "not found" in done.stderr
    assert done.stderr.count("gitsess: the git hooks cannot run") == 1, done.stderr
    assert "put gitsess on PATH or run 'gitsess hooks install' again" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    done = subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stderr.count("gitsess: the git hooks cannot run") == 1  # each git command says it


def test_pre_commit_shows_what_the_hooks_say() -> None:
    config = (Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text()
    assert config.count("  verbose: true") == config.count("- id: ") == 4


def test_run_after_the_branch_was_deleted_does_not_say_check_it_out(repo: Path) -> None:
    ok(repo, "new", "gone", "--worktree")
    git(session(repo, "gone").worktree, "checkout", "-q", "--detach")
    git(repo, "branch", "-D", "gitsess/gone")
    done = gitsess(repo, "run", "-s", "gone", "--", "true")
    assert done.returncode == 1
    assert "belongs to branch gitsess/gone, which was deleted" in done.stderr
    assert "check out" not in done.stderr and "--rebind" in done.stderr


def _detached_commit(repo: Path, name: str) -> tuple[Path, str]:
    ok(repo, "new", name, "--worktree")
    worktree = session(repo, name).worktree
    git(worktree, "checkout", "-q", "--detach")
    return worktree, commit(worktree, "detached.txt", "made on a detached HEAD\n")


def test_commits_on_a_detached_head_outlive_the_branch_and_the_session(repo: Path) -> None:
    worktree, made = _detached_commit(repo, "dx")
    git(repo, "branch", "-D", "gitsess/dx")
    done = ok(repo, "gc")
    assert "Removed session dx" in done
    assert "its detached HEAD has 1 commit(s) that no ref reaches" in done
    assert worktree.is_dir() and git(worktree, "rev-parse", "HEAD") == made

    worktree, made = _detached_commit(repo, "dy")
    done = ok(repo, "rm", "dy", "--force")
    assert not worktree.exists()
    assert "kept as refs/gitsess/detached/dy" in done
    assert git(repo, "rev-parse", "refs/gitsess/detached/dy") == made


def test_ls_says_what_catches_up_a_removed_worktree(repo: Path) -> None:
    """git runs no hook on `git worktree remove`: until gc, ls and show say what catches it up."""
    ok(repo, "new", "wt", "--worktree")
    git(repo, "worktree", "remove", str(session(repo, "wt").worktree))
    listed = ok(repo, "show", "wt")
    assert "`gitsess gc` archives the session" in listed
    assert "Removed session wt" in ok(repo, "gc")
