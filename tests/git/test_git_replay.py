"""A session's own HEAD, and replaying its commits (fast-forward, rebase, squash) against git."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from gitsess.errors import GitsessError
from gitsess.git.head import SessionHead, read_head, real_refs
from gitsess.git.replay import Replayed, replay_commits
from gitsess.git.session_refs import commits_not_in, first_parent_chain
from tests.util import git, make_repo, write

from .helpers import copy_repo

COMMITTER = pygit2.Signature("Gitsess Promoter", "promoter@example.com", 1_700_000_000, 60)


def reader(git_dir: Path) -> Callable[[str], bytes | None]:
    def read(rel: str) -> bytes | None:
        path = git_dir / rel
        return path.read_bytes() if path.is_file() else None

    return read


def dict_reader(files: dict[str, bytes]) -> Callable[[str], bytes | None]:
    return files.get


def rev(repo: Path, name: str) -> str:
    return git(repo, "rev-parse", name).strip()


def commit(repo: Path, files: dict[str, str], message: str, author: str = "Test Author") -> str:
    for rel, data in files.items():
        write(repo, rel, data)
    env = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": f"{author.split()[0].lower()}@ex.org"}
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, env=env)
    return rev(repo, "HEAD")


def all_refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)") + rev(repo, "HEAD")


LINES = "".join(f"line {i}\n" for i in range(20))


def edit_line(n: int, text: str, base: str = LINES) -> str:
    lines = base.splitlines(keepends=True)
    lines[n] = text + "\n"
    return "".join(lines)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"a.txt": LINES, "b.txt": LINES, "c.txt": "c\n"})


# -- read_head ---------------------------------------------------------------------------------


def test_read_head_loose_ref(repo: Path) -> None:
    assert (repo / ".git/refs/heads/main").is_file()
    assert read_head(reader(repo / ".git")) == SessionHead("refs/heads/main", rev(repo, "HEAD"))


def test_read_head_packed_ref_skips_peeled_lines(repo: Path) -> None:
    git(repo, "tag", "-a", "-m", "annotated", "v1")
    git(repo, "branch", "other")
    git(repo, "pack-refs", "--all")
    packed = (repo / ".git/packed-refs").read_bytes()
    assert not (repo / ".git/refs/heads/main").exists()
    assert b"\n^" in packed and packed.startswith(b"#")
    assert read_head(reader(repo / ".git")) == SessionHead("refs/heads/main", rev(repo, "HEAD"))


def test_read_head_loose_ref_wins_over_packed(repo: Path) -> None:
    old = rev(repo, "HEAD")
    git(repo, "pack-refs", "--all")
    new = commit(repo, {"c.txt": "changed\n"}, "second")
    packed = (repo / ".git/packed-refs").read_text()
    assert f"{old} refs/heads/main" in packed
    assert read_head(reader(repo / ".git")) == SessionHead("refs/heads/main", new)


def test_read_head_detached(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    assert read_head(reader(repo / ".git")) == SessionHead(None, rev(repo, "HEAD"))


def test_read_head_detached_sha256() -> None:
    oid = "ab" * 32
    assert read_head(dict_reader({"HEAD": oid.encode() + b"\n"})) == SessionHead(None, oid)


def test_read_head_unborn(tmp_path: Path, repo: Path) -> None:
    fresh = tmp_path / "fresh"
    git(tmp_path, "init", "-q", "-b", "trunk", str(fresh))
    assert read_head(reader(fresh / ".git")) == SessionHead("refs/heads/trunk", None)
    # unborn while other refs are packed: the lookup must miss there too
    git(repo, "pack-refs", "--all")
    git(repo, "checkout", "-q", "--orphan", "newbranch")
    assert read_head(reader(repo / ".git")) == SessionHead("refs/heads/newbranch", None)


def test_read_head_symbolic_chain(repo: Path) -> None:
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    # a commit through HEAD moves the end of the chain: that is the branch
    new = commit(repo, {"c.txt": "via alias\n"}, "through alias")
    assert rev(repo, "refs/heads/main") == new
    assert read_head(reader(repo / ".git")) == SessionHead("refs/heads/main", new)


def test_read_head_symbolic_loop_fails() -> None:
    files = {"HEAD": b"ref: refs/heads/a\n", "refs/heads/a": b"ref: refs/heads/b\n"}
    files["refs/heads/b"] = b"ref: refs/heads/a\n"
    with pytest.raises(GitsessError, match="chain"):
        read_head(dict_reader(files))


@pytest.mark.parametrize(
    "files",
    [
        {},
        {"HEAD": b"garbage\n"},
        {"HEAD": b"0123abc\n"},
        {"HEAD": b"A" * 40 + b"\n"},
        {"HEAD": b"ref: ../../etc/passwd\n"},
        {"HEAD": b"ref: refs/heads/../../config\n"},
        {"HEAD": b"ref: HEAD\n"},
        {"HEAD": b"ref: refs/heads/x\n", "refs/heads/x": b"not an id\n"},
        {"HEAD": ("0" * 40 + "\n" + "1" * 40 + "\n").encode()},
    ],
    ids=lambda f: repr(f)[:40],
)
def test_read_head_malformed(files: dict[str, bytes]) -> None:
    with pytest.raises(GitsessError) as info:
        read_head(dict_reader(files))
    assert "\n" not in str(info.value)


# -- commits_not_in, first_parent_chain, real_refs -------------------------------------------


def test_commits_not_in_matches_rev_list(repo: Path) -> None:
    base = rev(repo, "HEAD")
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, {"a.txt": edit_line(1, "side")}, "s1")
    git(repo, "checkout", "-q", "main")
    commit(repo, {"b.txt": edit_line(1, "main")}, "m1")
    git(repo, "checkout", "-q", "-b", "session", base)
    x1 = commit(repo, {"c.txt": "x\n"}, "x1")
    git(repo, "merge", "-q", "--no-edit", "side")
    head = commit(repo, {"c.txt": "y\n"}, "x2")

    repository = pygit2.Repository(str(repo))
    got = commits_not_in(repository, head, [rev(repo, "main")])
    expect = git(repo, "rev-list", "--reverse", "--topo-order", "main..session").split()
    assert got == expect
    assert len(got) == 4  # x1, s1, the merge, x2
    assert got[-1] == head
    # a real branch's commits are no session's, whichever it merged
    assert len(commits_not_in(repository, head, [rev(repo, "main"), rev(repo, "side")])) == 3
    assert (
        commits_not_in(repository, head, [])
        == git(repo, "rev-list", "--reverse", "--topo-order", "session").split()
    )
    assert commits_not_in(repository, head, [head]) == []
    assert commits_not_in(repository, None, [head]) == []
    assert commits_not_in(repository, base, [head]) == []
    merge = rev(repo, "session~1")
    assert first_parent_chain(repository, got) == [x1, merge, head]


def test_commits_not_in_unknown_commit(repo: Path) -> None:
    with pytest.raises(GitsessError):
        commits_not_in(pygit2.Repository(str(repo)), "1" * 40, [])


def test_real_refs_reads_loose_and_packed(repo: Path) -> None:
    git(repo, "branch", "packed")
    git(repo, "tag", "t1")
    git(repo, "pack-refs", "--all")
    loose = commit(repo, {"a.txt": "loose\n"}, "loose")
    refs = real_refs(repo / ".git")
    assert refs["refs/heads/main"] == loose
    assert refs["refs/heads/packed"] == refs["refs/tags/t1"] == rev(repo, "packed")
    assert not any(name.startswith("refs/stash") for name in refs)


# -- replay_commits ---------------------------------------------------------------------------


def session_commits(repo: Path, steps: list[tuple[dict[str, str], str, str]]) -> list[str]:
    """Commits on branch `session` from main's tip; back on main afterwards."""
    git(repo, "checkout", "-q", "-b", "session")
    ids = [commit(repo, files, message, author) for files, message, author in steps]
    git(repo, "checkout", "-q", "main")
    return ids


def git_rebase(repo: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """`git rebase main session` in a copy: the copy and its new session commits."""
    other = copy_repo(repo, tmp_path / "rebased")
    git(other, "rebase", "-q", "main", "session", env={"GIT_COMMITTER_NAME": "Rebaser"})
    return other, git(other, "rev-list", "--reverse", "main..session").split()


THREE = [
    ({"a.txt": edit_line(2, "one")}, "first\n\nbody", "Alice One"),
    ({"a.txt": edit_line(2, "one", edit_line(10, "two")), "new.txt": "n\n"}, "second", "Bob Two"),
    ({"c.txt": "three\n"}, "third", "Carol Three"),
]


def test_promote_fast_forward(repo: Path) -> None:
    ids = session_commits(repo, THREE)
    before = all_refs(repo)
    result = replay_commits(pygit2.Repository(str(repo)), ids, rev(repo, "main"))
    assert result == Replayed(ids[-1], tuple(ids), True, ())
    assert all_refs(repo) == before


def test_promote_rebase_like_git(repo: Path, tmp_path: Path) -> None:
    ids = session_commits(repo, THREE)
    main_tip = commit(repo, {"b.txt": edit_line(5, "main moved"), "a.txt": edit_line(18, "m")}, "m")
    before = all_refs(repo)
    repository = pygit2.Repository(str(repo))

    result = replay_commits(repository, ids, main_tip, committer=COMMITTER)

    assert all_refs(repo) == before
    assert not result.fast_forward and result.conflicts == ()
    assert len(result.commits) == 3 and result.tip == result.commits[-1]
    assert not set(result.commits) & set(ids)
    other, expected = git_rebase(repo, tmp_path)
    assert len(expected) == 3
    for new_id, orig_id, git_id in zip(result.commits, ids, expected, strict=True):
        new, orig = repository[new_id].peel(pygit2.Commit), repository[orig_id].peel(pygit2.Commit)
        assert str(new.tree_id) == git(other, "rev-parse", f"{git_id}^{{tree}}").strip()
        assert (new.author.name, new.author.email, new.author.time) == (
            orig.author.name,
            orig.author.email,
            orig.author.time,
        )
        assert new.raw_message == orig.raw_message
        assert (new.committer.name, new.committer.time) == (COMMITTER.name, COMMITTER.time)
    chain = [main_tip, *result.commits]
    for parent, child in itertools.pairwise(chain):
        assert [str(p) for p in repository[child].peel(pygit2.Commit).parent_ids] == [parent]
    # the objects are real: git itself can read the new history
    log = git(repo, "log", "--format=%an", result.tip or "").split("\n")
    assert log[:3] == ["Carol Three", "Bob Two", "Alice One"]


def test_promote_rebase_keeps_committer_by_default(repo: Path) -> None:
    ids = session_commits(repo, THREE[:1])
    main_tip = commit(repo, {"b.txt": "moved\n"}, "m")
    repository = pygit2.Repository(str(repo))
    result = replay_commits(repository, ids, main_tip)
    new = repository[result.tip or ""].peel(pygit2.Commit)
    orig = repository[ids[0]].peel(pygit2.Commit)
    assert (new.committer.name, new.committer.time) == (orig.committer.name, orig.committer.time)
    assert new.committer.name == "Test Committer"


def test_promote_conflict_lists_paths_and_moves_no_ref(repo: Path) -> None:
    ids = session_commits(
        repo,
        [
            ({"c.txt": "fine\n"}, "clean", "Alice One"),
            ({"a.txt": edit_line(3, "session"), "b.txt": edit_line(4, "session")}, "x", "Bob"),
        ],
    )
    main_tip = commit(repo, {"a.txt": edit_line(3, "main"), "b.txt": edit_line(4, "main")}, "m")
    before = all_refs(repo)
    result = replay_commits(pygit2.Repository(str(repo)), ids, main_tip, committer=COMMITTER)
    assert result == Replayed(None, (), False, ("a.txt", "b.txt"))
    assert all_refs(repo) == before
    # a squash meets the same conflict
    squashed = replay_commits(pygit2.Repository(str(repo)), ids, main_tip, squash_message="s")
    assert squashed.conflicts == ("a.txt", "b.txt") and squashed.tip is None
    assert all_refs(repo) == before


def test_promote_squash(repo: Path, tmp_path: Path) -> None:
    ids = session_commits(repo, THREE)
    main_tip = commit(repo, {"b.txt": edit_line(5, "main moved")}, "m")
    before = all_refs(repo)
    repository = pygit2.Repository(str(repo))

    result = replay_commits(
        repository, ids, main_tip, squash_message="all in one\n", committer=COMMITTER
    )

    assert all_refs(repo) == before
    assert not result.fast_forward and result.conflicts == ()
    assert result.commits == (result.tip,)
    new = repository[result.tip or ""].peel(pygit2.Commit)
    assert [str(p) for p in new.parent_ids] == [main_tip]
    assert new.message == "all in one\n"
    assert new.author.name == "Alice One"
    assert new.committer.name == COMMITTER.name
    other, expected = git_rebase(repo, tmp_path)
    assert str(new.tree_id) == git(other, "rev-parse", f"{expected[-1]}^{{tree}}").strip()


def test_promote_squash_even_when_branch_did_not_move(repo: Path) -> None:
    ids = session_commits(repo, THREE)
    repository = pygit2.Repository(str(repo))
    result = replay_commits(repository, ids, rev(repo, "main"), squash_message="one")
    assert not result.fast_forward and len(result.commits) == 1
    new = repository[result.tip or ""].peel(pygit2.Commit)
    assert new.tree_id == repository[ids[-1]].peel(pygit2.Commit).tree_id
    assert [str(p) for p in new.parent_ids] == [rev(repo, "main")]


def test_promote_drops_commit_that_became_empty(repo: Path, tmp_path: Path) -> None:
    ids = session_commits(
        repo,
        [
            ({"a.txt": edit_line(2, "same")}, "also on main", "Alice One"),
            ({"c.txt": "own\n"}, "own change", "Bob Two"),
        ],
    )
    main_tip = commit(repo, {"a.txt": edit_line(2, "same")}, "main did it first")
    repository = pygit2.Repository(str(repo))
    result = replay_commits(repository, ids, main_tip)
    assert len(result.commits) == 1 and result.tip == result.commits[0]
    new = repository[result.tip or ""].peel(pygit2.Commit)
    assert new.message == "own change\n"
    assert [str(p) for p in new.parent_ids] == [main_tip]
    other, expected = git_rebase(repo, tmp_path)
    assert len(expected) == 1
    assert str(new.tree_id) == git(other, "rev-parse", f"{expected[0]}^{{tree}}").strip()


def test_promote_all_dropped_leaves_tip_at_onto(repo: Path) -> None:
    ids = session_commits(repo, [({"a.txt": edit_line(2, "same")}, "dup", "Alice One")])
    main_tip = commit(repo, {"a.txt": edit_line(2, "same")}, "main did it first")
    result = replay_commits(pygit2.Repository(str(repo)), ids, main_tip)
    assert result == Replayed(main_tip, (), False, ())


def test_promote_merge_commit(repo: Path) -> None:
    base = rev(repo, "main")
    git(repo, "checkout", "-q", "-b", "side")
    commit(repo, {"b.txt": edit_line(7, "side")}, "side")
    git(repo, "checkout", "-q", "-b", "session", base)
    commit(repo, {"c.txt": "s\n"}, "s1")
    git(repo, "merge", "-q", "--no-edit", "side")
    git(repo, "checkout", "-q", "main")
    repository = pygit2.Repository(str(repo))
    ids = git(repo, "rev-list", "--reverse", "--first-parent", "main..session").split()
    assert len(ids) == 2

    ff = replay_commits(repository, ids, base)
    assert ff == Replayed(ids[-1], tuple(ids), True, ())

    main_tip = commit(repo, {"a.txt": "moved\n"}, "m")
    replayed = replay_commits(repository, ids, main_tip)
    merge = repository[replayed.tip or ""].peel(pygit2.Commit)
    assert [str(p) for p in merge.parent_ids] == [replayed.commits[0], rev(repo, "side")]
    assert merge.tree["b.txt"].peel(pygit2.Blob).data.decode() == edit_line(7, "side")
    assert merge.tree["a.txt"].peel(pygit2.Blob).data == b"moved\n"
    squashed = replay_commits(repository, ids, main_tip, squash_message="sq")
    new = repository[squashed.tip or ""].peel(pygit2.Commit)
    assert new.tree["b.txt"].peel(pygit2.Blob).data.decode() == edit_line(7, "side")
    assert new.tree["a.txt"].peel(pygit2.Blob).data == b"moved\n"


def test_promote_skips_commits_the_branch_has_by_another_route(repo: Path) -> None:
    ids = session_commits(repo, THREE)
    git(repo, "checkout", "-q", "main")
    git(repo, "cherry-pick", ids[0])
    # the branch changed the picked line again: re-applying the pick would conflict
    main_tip = commit(repo, {"a.txt": edit_line(2, "later")}, "later")
    result = replay_commits(pygit2.Repository(str(repo)), ids, main_tip)
    assert len(result.commits) == 2
    assert git(repo, "log", "--format=%s", f"{main_tip}..{result.tip}").splitlines() == [
        "third", "second",
    ]  # fmt: skip


def test_promote_rejects_broken_chain(repo: Path) -> None:
    ids = session_commits(repo, THREE)
    with pytest.raises(GitsessError, match="does not follow"):
        replay_commits(pygit2.Repository(str(repo)), [ids[0], ids[2]], rev(repo, "main"))
    with pytest.raises(GitsessError, match="not in the repository"):
        replay_commits(pygit2.Repository(str(repo)), ["2" * 40], rev(repo, "main"))


def test_promote_squash_of_changes_already_on_branch_creates_nothing(repo: Path) -> None:
    ids = session_commits(repo, [({"a.txt": edit_line(2, "same")}, "dup", "Alice One")])
    main_tip = commit(repo, {"a.txt": edit_line(2, "same")}, "main did it first")
    result = replay_commits(pygit2.Repository(str(repo)), ids, main_tip, squash_message="s")
    assert result == Replayed(main_tip, (), False, ())
