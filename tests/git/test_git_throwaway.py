"""What a gated apply's throwaway view is made of (`git/throwaway.py`), against real git: the
paths where a commit differs from a worktree as it is, and the index that goes with them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2

from gitsess.git.throwaway import differing, index_for
from tests.util import git


def _commit_elsewhere(repo: Path) -> str:
    """A commit on a side branch (the worktree stays on main): run.sh loses its x bit,
    src/util.py changes, docs/guide.txt goes, new.txt comes."""
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "src" / "util.py").write_text("def f():\n    return 2\n")
    (repo / "run.sh").chmod(0o644)
    (repo / "docs" / "guide.txt").unlink()
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "side")
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return commit


def _blob(repo: Path, commit: str, path: str) -> tuple[str, int]:
    mode, _, oid = git(repo, "ls-tree", commit, "--", path).split()[:3]
    return oid, int(mode, 8)


def test_differing_is_what_the_commit_changed_and_what_the_worktree_has_of_its_own(
    repo_dir: Path,
) -> None:
    commit = _commit_elsewhere(repo_dir)
    (repo_dir / "README.md").write_text("edited, not committed\n")
    (repo_dir / "scratch.txt").write_text("untracked\n")
    (repo_dir / "build").mkdir()
    (repo_dir / "build" / "out.o").write_text("ignored\n")
    git(repo_dir, "add", "scratch.txt")  # staged: still not the commit's
    found = {p.path: p.entry for p in differing(pygit2.Repository(str(repo_dir)), commit)}
    assert found == {
        "README.md": _blob(repo_dir, commit, "README.md"),
        "docs/guide.txt": None,
        "new.txt": _blob(repo_dir, commit, "new.txt"),
        "run.sh": _blob(repo_dir, commit, "run.sh"),
        "scratch.txt": None,
        "src/util.py": _blob(repo_dir, commit, "src/util.py"),
    }
    assert found["run.sh"][1] == 0o100644  # type: ignore[index]


def _entries(repo: Path, data: bytes) -> dict[str, str]:
    """path -> what `git ls-files --debug` says of the entry (its id, mode and stat data)."""
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        listed = git(repo, "ls-files", "--debug", "--stage", env={"GIT_INDEX_FILE": f.name})
    out: dict[str, str] = {}
    for line in listed.splitlines():
        if not line.startswith(" "):
            path = line.split("\t", 1)[1]
            out[path] = line.split("\t", 1)[0]
        else:
            out[path] += "\n" + line.strip()
    return out


def test_the_index_is_the_worktrees_with_the_differing_paths_set_to_the_commit(
    repo_dir: Path,
) -> None:
    commit = _commit_elsewhere(repo_dir)
    repo = pygit2.Repository(str(repo_dir))
    paths = differing(repo, commit)
    made = _entries(repo_dir, index_for(repo, commit, paths))
    assert {p: e.splitlines()[0] for p, e in made.items()} == {
        line.split("\t")[1]: f"{line.split()[0]} {line.split()[2]} 0"
        for line in git(repo_dir, "ls-tree", "-r", commit).splitlines()
    }
    real = _entries(repo_dir, (repo_dir / ".git" / "index").read_bytes())
    changed = {p.path for p in paths}
    # untouched entries keep the worktree's stat data; the others have none (git checks them)
    assert all(made[p] == real[p] for p in made if p not in changed)
    assert all("size: 0\t" in made[p] for p in made if p in changed)


def test_an_index_in_conflict_is_made_again_from_the_commit(repo_dir: Path) -> None:
    commit = _commit_elsewhere(repo_dir)
    git(repo_dir, "checkout", "-q", "-b", "other")
    (repo_dir / "README.md").write_text("other\n")
    git(repo_dir, "commit", "-q", "-am", "other")
    git(repo_dir, "checkout", "-q", "main")
    (repo_dir / "README.md").write_text("main\n")
    git(repo_dir, "commit", "-q", "-am", "main")
    git(repo_dir, "merge", "-q", "other", check=False)
    assert git(repo_dir, "ls-files", "--unmerged") != ""
    repo = pygit2.Repository(str(repo_dir))
    made = _entries(repo_dir, index_for(repo, commit, differing(repo, commit)))
    assert sorted(made) == sorted(git(repo_dir, "ls-tree", "-r", "--name-only", commit).split())
    assert all(e.splitlines()[0].endswith(" 0") for e in made.values())  # stage 0 only
