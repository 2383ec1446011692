"""Model check: git run inside a session must do what it does in a plain copy of the repository.

A session's `.git` is copy-on-write (HEAD, index, refs, config and objects are the
session's), and `gitsess run` binds the view over the worktree's own path. So a random script
of file edits and git commands (fetch, gc, repack and commit-graph among them), run once inside
a fresh session and once in a `cp -a` copy of the repository taken before any session existed,
must print the same exit codes and end in the same commits, branches, status, tree, stash and
files; and the real `.git` must be left byte-identical, every file, objects included, with
`git fsck` clean.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.live_util import unmount_all
from tests.util import commit, git, gitsess, make_repo

pytestmark = pytest.mark.fuse

PATHS = ["README.md", "src/app.py", "a.txt", "b.txt", "src/new.py"]
BRANCHES = ["topic", "fix"]
DATE = "2001-02-03T04:05:06+00:00"
words = st.sampled_from(["x", "y", "hello", "1 2 3", ""])
paths = st.sampled_from(PATHS)


def _q(text: str) -> str:
    return shlex.quote(text)


ops = st.one_of(
    st.builds(lambda p, w: f"printf '%s\\n' {_q(w)} > {_q(p)}", paths, words),
    st.builds(lambda p, w: f"printf '%s\\n' {_q(w)} >> {_q(p)}", paths, words),
    st.builds(lambda p: f"rm {_q(p)}", paths),
    st.just("git add -A"),
    st.builds(
        lambda m: f"if git diff --cached --quiet; then :; else git commit -qm {_q(m)}; fi",
        st.sampled_from(["one", "two", "three"]),
    ),
    st.builds(
        lambda b: (
            f"if git rev-parse -q --verify refs/heads/{b} >/dev/null; then :; "
            f"else git checkout -qb {b}; fi"
        ),
        st.sampled_from(BRANCHES),
    ),
    st.just("git checkout -q main"),
    st.just("git stash -q"),
    st.just("git stash pop -q"),
    st.just("if git rev-parse -q --verify HEAD~1 >/dev/null; then git reset -q --hard HEAD~1; fi"),
    st.builds(lambda a, b: f"git mv {_q(a)} {_q(b)}", paths, paths),
    st.builds(lambda p: f"git rm -q {_q(p)}", paths),
    st.just("git fetch -q origin"),
    st.just("git merge -q --ff-only origin/main"),
    st.just("git gc -q"),
    st.just("git gc -q --prune=now"),
    st.just("git repack -q -a -d"),
    st.just("git commit-graph write --reachable"),
    st.just("git prune"),
)

# Branches and the stash only: `gitsess rm` archives each example's session under refs of the
# real repository, which every later session's copy of the refs then holds (and a model lacks).
FINAL = """
echo '--- log'; git log --format='%H %s' --branches --remotes
echo '--- branches'; git for-each-ref --format='%(refname) %(objectname)' refs/heads refs/stash \
    refs/remotes
echo '--- fsck'; git fsck --no-dangling --no-progress >/dev/null 2>&1; echo "fsck $?"
echo '--- status'; git status --porcelain=v2 --branch --untracked-files=all
echo '--- tree'; git ls-tree -r HEAD
echo '--- stash'; git stash list
echo '--- files'; find . -path ./.git -prune -o -type f -print | LC_ALL=C sort | xargs -r sha256sum
"""


def render(steps: list[str]) -> str:
    """One script: every step's stdout and exit code, then the state to compare."""
    lines = [
        f"export GIT_AUTHOR_DATE={DATE} GIT_COMMITTER_DATE={DATE}",
        *(f'{{ {step}; }} 2>/dev/null; echo "step {i} rc=$?"' for i, step in enumerate(steps)),
    ]
    return "\n".join(lines) + "\n" + FINAL


def real_state(repo: Path) -> dict[str, str]:
    """What nothing inside a session may change: every file below the real `.git` (the state
    dir of gitsess aside), its mode and bytes."""
    top = repo / ".git"
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        if Path(dirpath) == top and "gitsess" in dirnames:
            dirnames.remove("gitsess")
        for name in filenames:
            path = Path(dirpath) / name
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(top))] = f"{path.lstat().st_mode:o}:{digest}"
    return out


@pytest.fixture
def repos(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The real repository (main, a few files, two commits; its remote `origin` 40 commits
    ahead, over 100 objects: a fetch of them is a pack) and a pristine copy for models."""
    repo = make_repo(tmp_path / "repo")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.com")
    commit(repo, "a.txt", "alpha\n", "second")
    origin = tmp_path / "origin"
    git(tmp_path, "clone", "-q", str(repo), str(origin))
    for i in range(40):
        commit(origin, "up.txt", f"{i}\n", f"up {i}")
    git(repo, "remote", "add", "origin", str(origin))
    template = tmp_path / "template"
    subprocess.run(["cp", "-a", str(repo), str(template)], check=True)
    try:
        yield repo, template
    finally:
        unmount_all(repo)


_examples = itertools.count()


def check(repos: tuple[Path, Path], steps: list[str]) -> None:
    repo, template = repos
    n = next(_examples)
    model = template.parent / f"model{n}"
    session = f"model{n}"
    script = render(steps)
    before = real_state(repo)
    try:
        subprocess.run(["cp", "-a", str(template), str(model)], check=True)
        want = subprocess.run(
            ["sh", "-c", script], cwd=model, capture_output=True, text=True, timeout=60
        )
        got = gitsess(repo, "run", "-s", session, "--", "sh", "-c", script)
        assert got.returncode == want.returncode == 0, got.stderr
        assert got.stdout == want.stdout, script
        assert real_state(repo) == before
        fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, capture_output=True)
        assert fsck.returncode == 0, fsck.stderr
    finally:
        shutil.rmtree(model, ignore_errors=True)
        gitsess(repo, "rm", "--force", session)


COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
scripts = st.lists(ops, min_size=3, max_size=8)


@pytest.mark.timeout(300)
@settings(max_examples=8, **COMMON)  # type: ignore[arg-type]
@given(steps=scripts)
def test_git_in_a_session_matches_a_plain_copy(repos: tuple[Path, Path], steps: list[str]) -> None:
    check(repos, steps)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=200, **COMMON)  # type: ignore[arg-type]
@given(steps=scripts)
def test_git_in_a_session_matches_a_plain_copy_long(
    repos: tuple[Path, Path], steps: list[str]
) -> None:
    check(repos, steps)


# ---------------------------------------------------------------------------------------------
# outside commits interleaved with the session's own


# Makes HEAD, the index and the branch's ref the session's own from the start (a ref written,
# even with the value it has): from then on a commit made outside shows in the session as a
# plain copy would see it, a file that appears in its worktree, never in its HEAD.
OWN_GIT = "git update-ref refs/heads/main HEAD"


def check_interleaved(repos: tuple[Path, Path], chunks: list[list[str]]) -> None:
    repo, template = repos
    n = next(_examples)
    model = template.parent / f"model{n}"
    session = f"model{n}"
    outside: list[str] = []
    start = git(template, "rev-parse", "HEAD")
    try:
        subprocess.run(["cp", "-a", str(template), str(model)], check=True)
        for k, steps in enumerate(chunks):
            script = render([OWN_GIT, *steps] if k == 0 else steps).replace(FINAL, "")
            before = real_state(repo)
            want = subprocess.run(
                ["sh", "-c", script], cwd=model, capture_output=True, text=True, timeout=60
            )
            got = gitsess(repo, "run", "-s", session, "--", "sh", "-c", script)
            assert got.returncode == want.returncode == 0, got.stderr
            assert got.stdout == want.stdout, script
            assert real_state(repo) == before
            name = f"out{n}-{k}.txt"  # the real repository is the same for every example
            (model / name).write_text(f"outside {k}\n")
            outside.append(commit(repo, name, f"outside {k}\n", f"outside {k}"))
        final = render([])
        want = subprocess.run(["sh", "-c", final], cwd=model, capture_output=True, text=True)
        got = gitsess(repo, "run", "-s", session, "--", "sh", "-c", final)
        assert got.stdout == want.stdout
        applied = gitsess(repo, "apply", session, "--commit", "--branch", "main", "-m", "end")
        assert applied.returncode in (0, 1), applied.stderr
        on_main = set(git(repo, "rev-list", "main").split())
        assert set(outside) <= on_main
        fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, capture_output=True)
        assert fsck.returncode == 0, fsck.stderr
    finally:
        shutil.rmtree(model, ignore_errors=True)
        gitsess(repo, "rm", "--force", session)
        # the next example starts where the model's copy does
        git(repo, "reset", "-q", "--hard", start)


interleaved = st.lists(st.lists(ops, min_size=1, max_size=4), min_size=2, max_size=3)


@pytest.mark.timeout(600)
@settings(max_examples=3, **COMMON)  # type: ignore[arg-type]
@given(chunks=interleaved)
def test_outside_commits_interleaved_with_the_sessions(
    repos: tuple[Path, Path], chunks: list[list[str]]
) -> None:
    check_interleaved(repos, chunks)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=100, **COMMON)  # type: ignore[arg-type]
@given(chunks=interleaved)
def test_outside_commits_interleaved_with_the_sessions_long(
    repos: tuple[Path, Path], chunks: list[list[str]]
) -> None:
    check_interleaved(repos, chunks)
