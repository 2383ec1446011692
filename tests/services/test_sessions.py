from __future__ import annotations

import shutil
import stat
import uuid
from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext, discover
from gitsess.services import sessions
from gitsess.store.registry import Registry
from gitsess.store.user_index import UserIndex, index_path
from tests.util import git, make_repo


@pytest.mark.parametrize(
    "name",
    ["a", "A9", "exp-1", "with.dot", "under_score", "x" * 64, "0start"],
)
def test_valid_names(name: str) -> None:
    assert sessions.validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-lead",
        ".hidden",
        "_lead",
        "has space",
        "sl/ash",
        "a..b",
        "x" * 65,
        "trail.",
        "ends.lock",
        "ünï",
        "568764a4-5293-4529-8b4c-2ed0b6ff763b",
    ],
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(GitsessError, match="session"):
        sessions.validate_name(name)


def test_create_binds_to_the_current_worktree_and_branch(ctx: RepoContext, repo: Path) -> None:
    s = sessions.create(ctx, "exp", title="try it")
    assert (s.name, s.title, s.state, s.seq) == ("exp", "try it", "active", 1)
    assert s.worktree == repo
    assert s.branch == "main"
    assert s.base_commit == git(repo, "rev-parse", "HEAD")
    assert not s.created_worktree and not s.created_branch
    assert uuid.UUID(s.id).version == 4
    session_dir = ctx.session_dir(s.id)
    assert session_dir.is_dir()
    assert stat.S_IMODE(session_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(ctx.state_dir.stat().st_mode) == 0o700


def test_detached_head_records_the_commit(ctx: RepoContext, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    s = sessions.create(ctx, "det")
    assert s.branch is None
    assert s.base_commit == git(repo, "rev-parse", "HEAD")


def test_generated_names_are_unique_and_valid(ctx: RepoContext) -> None:
    names = {sessions.create(ctx).name for _ in range(12)}
    assert len(names) == 12
    for name in names:
        assert sessions.validate_name(name) == name


def test_a_uuid_given_as_name_becomes_the_id(ctx: RepoContext) -> None:
    chosen = str(uuid.uuid4()).upper()
    s = sessions.create(ctx, chosen)
    assert s.id == chosen.lower()
    assert s.name != chosen


def test_duplicate_name_is_refused_and_changes_nothing(ctx: RepoContext) -> None:
    sessions.create(ctx, "exp")
    before = sorted(p.name for p in ctx.sessions_dir.iterdir())
    with pytest.raises(GitsessError, match="already exists"):
        sessions.create(ctx, "exp")
    assert sorted(p.name for p in ctx.sessions_dir.iterdir()) == before
    assert len(sessions.list_sessions(ctx)) == 1


def test_invalid_name_writes_nothing(ctx: RepoContext) -> None:
    with pytest.raises(GitsessError, match="invalid session name"):
        sessions.create(ctx, "no/slashes")
    assert not ctx.state_dir.exists()


def test_bare_repository_without_worktree_option_writes_nothing(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--bare", "bare.git")
    ctx = discover(tmp_path / "bare.git", env={})
    with pytest.raises(GitsessError, match="bare repository"):
        sessions.create(ctx, "x")
    assert not ctx.state_dir.exists()


@pytest.fixture
def three(ctx: RepoContext) -> list[sessions.Session]:
    return [sessions.create(ctx, name) for name in ("one", "two", "three")]


def test_resolve_by_name_id_prefix_and_offset(
    ctx: RepoContext, three: list[sessions.Session]
) -> None:
    one, two, three_ = three
    assert sessions.resolve(ctx, "two") == two
    assert sessions.resolve(ctx, one.id) == one
    assert sessions.resolve(ctx, one.id.upper()) == one
    assert sessions.resolve(ctx, three_.id[:8]) == three_
    assert sessions.resolve(ctx, "-1") == three_
    assert sessions.resolve(ctx, "-3") == one


def test_offsets_count_creation_not_use(ctx: RepoContext, three: list[sessions.Session]) -> None:
    sessions.touch(ctx, three[0])
    assert sessions.resolve(ctx, "-1") == three[2]


def test_offset_past_the_end(ctx: RepoContext, three: list[sessions.Session]) -> None:
    with pytest.raises(GitsessError, match="only 3 sessions"):
        sessions.resolve(ctx, "-4")
    with pytest.raises(GitsessError, match="-1 is the newest"):
        sessions.resolve(ctx, "-0")


def test_offset_with_no_sessions_at_all(ctx: RepoContext) -> None:
    with pytest.raises(GitsessError, match="no sessions"):
        sessions.resolve(ctx, "-1", create_missing=True)
    with pytest.raises(GitsessError, match="no sessions"):
        sessions.resolve(ctx, "-1")


def _with_ids(ctx: RepoContext, *ids: str) -> None:
    for i in ids:
        sessions.create(ctx, i)


def test_ambiguous_prefix_lists_the_candidates(ctx: RepoContext) -> None:
    a = "abcd1111-0000-4000-8000-000000000000"
    b = "abcd2222-0000-4000-8000-000000000000"
    _with_ids(ctx, a, b)
    with pytest.raises(GitsessError, match="ambiguous") as caught:
        sessions.resolve(ctx, "abcd")
    assert a in str(caught.value) and b in str(caught.value)
    assert sessions.resolve(ctx, "abcd2").id == b


def test_a_name_wins_over_an_id_prefix(ctx: RepoContext) -> None:
    _with_ids(ctx, "beef0000-0000-4000-8000-000000000000")
    named = sessions.create(ctx, "beef")
    assert sessions.resolve(ctx, "beef") == named


def test_short_prefixes_are_names_not_ids(ctx: RepoContext) -> None:
    _with_ids(ctx, "abc00000-0000-4000-8000-000000000000")
    with pytest.raises(GitsessError, match="no session 'abc'"):
        sessions.resolve(ctx, "abc")


def test_unknown_ref_is_an_error_without_create(
    ctx: RepoContext, three: list[sessions.Session]
) -> None:
    with pytest.raises(GitsessError, match="no session 'nope'"):
        sessions.resolve(ctx, "nope")
    assert len(sessions.list_sessions(ctx)) == 3


def test_create_missing_creates_names_and_ids_but_reuses_them_after(ctx: RepoContext) -> None:
    made = sessions.resolve(ctx, "fresh", create_missing=True)
    assert made.name == "fresh"
    assert sessions.resolve(ctx, "fresh", create_missing=True) == made
    chosen = str(uuid.uuid4())
    by_id = sessions.resolve(ctx, chosen, create_missing=True)
    assert by_id.id == chosen
    assert sessions.resolve(ctx, chosen, create_missing=True) == by_id
    assert len(sessions.list_sessions(ctx)) == 2


def test_create_missing_refuses_an_invalid_name(ctx: RepoContext) -> None:
    with pytest.raises(GitsessError, match="invalid session name"):
        sessions.resolve(ctx, "bad name", create_missing=True)


def test_default_session_comes_from_the_environment(
    ctx: RepoContext, three: list[sessions.Session]
) -> None:
    assert sessions.resolve(ctx, None, env={"GITSESS_SESSION": three[1].id}) == three[1]
    assert sessions.resolve(ctx, "one", env={"GITSESS_SESSION": three[1].id}) == three[0]
    with pytest.raises(GitsessError, match="no session given"):
        sessions.resolve(ctx, None, env={})


def test_a_runs_session_renamed_since_is_found_by_its_id(
    ctx: RepoContext, three: list[sessions.Session]
) -> None:
    sessions.rename(ctx, three[1].name, "renamed")
    env = {"GITSESS_SESSION": three[1].name, "GITSESS_SESSION_ID": three[1].id}
    assert sessions.resolve(ctx, None, env=env).name == "renamed"
    assert sessions.info(ctx, None, env).session.name == "renamed"
    # a name given, or a $GITSESS_SESSION that names a session, is taken as it is
    assert sessions.resolve(ctx, three[0].name, env=env) == three[0]
    env["GITSESS_SESSION"] = three[2].name
    assert sessions.resolve(ctx, None, env=env) == three[2]


def test_resolving_from_another_worktree_finds_the_same_session(
    ctx: RepoContext, repo: Path, tmp_path: Path
) -> None:
    made = sessions.create(ctx, "exp")
    git(repo, "worktree", "add", "-q", "-b", "feat", str(tmp_path / "wt"))
    elsewhere = discover(tmp_path / "wt", env={})
    found = sessions.resolve(elsewhere, "exp")
    assert found == made
    assert found.worktree == repo and found.branch == "main"


def test_list_groups_by_worktree(ctx: RepoContext, repo: Path, tmp_path: Path) -> None:
    git(repo, "worktree", "add", "-q", "-b", "feat", str(tmp_path / "wt"))
    sessions.create(ctx, "here")
    sessions.create(discover(tmp_path / "wt", env={}), "there")
    listed = {i.session.name: i for i in sessions.list_sessions(ctx, env={})}
    assert listed["here"].here and not listed["there"].here
    assert (listed["here"].offset, listed["there"].offset) == (-2, -1)
    assert listed["there"].session.branch == "feat"
    assert listed["there"].worktree_exists
    assert listed["here"].changed_files is None
    # Inside a session, "here" is the session's worktree, whatever the current directory.
    inside = sessions.list_sessions(ctx, env={"GITSESS_SESSION": listed["there"].session.id})
    assert [i.session.name for i in inside if i.here] == ["there"]


def test_list_without_registry_writes_nothing(ctx: RepoContext) -> None:
    assert sessions.list_sessions(ctx) == []
    assert not ctx.state_dir.exists()


def test_info_reports_offset_and_directory(ctx: RepoContext, three: list[sessions.Session]) -> None:
    shown = sessions.info(ctx, "two")
    assert shown.session == three[1]
    assert shown.offset == -2
    assert shown.session_dir == ctx.sessions_dir / three[1].id


def test_rename(ctx: RepoContext, three: list[sessions.Session]) -> None:
    renamed = sessions.rename(ctx, "one", "uno")
    assert (renamed.id, renamed.name) == (three[0].id, "uno")
    assert sessions.resolve(ctx, "uno").id == three[0].id
    with pytest.raises(GitsessError, match="already exists"):
        sessions.rename(ctx, "uno", "two")
    with pytest.raises(GitsessError, match="invalid session name"):
        sessions.rename(ctx, "uno", "a..b")
    assert sessions.resolve(ctx, "-3").name == "uno"


def test_set_title_and_touch(ctx: RepoContext, three: list[sessions.Session]) -> None:
    assert sessions.set_title(ctx, "-1", "a title").title == "a title"
    assert sessions.set_title(ctx, "-1", "").title == ""
    touched = sessions.touch(ctx, three[0])
    assert touched.last_used_at > three[0].last_used_at
    assert touched.created_at == three[0].created_at


def test_remove_deletes_row_directory_and_history(
    ctx: RepoContext, three: list[sessions.Session]
) -> None:
    doomed = three[1]
    registry = Registry.open(ctx.registry_path, create=False)
    assert registry is not None
    registry.conn.execute(
        "INSERT INTO runs (session_id, command, cwd, started_at) VALUES (?, '[]', '/', 'x')",
        (doomed.id,),
    )
    removal = sessions.remove(ctx, "two")
    assert removal.session == doomed
    assert not removal.removed_worktree and not removal.notes
    assert not ctx.session_dir(doomed.id).exists()
    assert [i.session.name for i in sessions.list_sessions(ctx)] == ["one", "three"]
    assert registry.conn.execute("SELECT count(*) FROM runs").get == 0
    registry.close()


def test_remove_tolerates_a_missing_session_dir(ctx: RepoContext) -> None:
    made = sessions.create(ctx, "x")
    ctx.session_dir(made.id).rmdir()
    sessions.remove(ctx, "x")
    assert sessions.list_sessions(ctx) == []


def test_user_index_follows_create_and_last_remove(ctx: RepoContext) -> None:
    index = UserIndex(index_path())
    sessions.create(ctx, "a")
    sessions.create(ctx, "b")
    assert index.repos() == [(ctx.state_dir, ctx.common_dir)]
    sessions.remove(ctx, "a")
    assert index.repos() == [(ctx.state_dir, ctx.common_dir)]
    sessions.remove(ctx, "b")
    assert index.repos() == []


def test_list_everywhere_reads_every_indexed_repository(ctx: RepoContext, tmp_path: Path) -> None:
    other_repo = make_repo(tmp_path / "other")
    other = discover(other_repo, env={})
    sessions.create(ctx, "mine")
    sessions.create(other, "theirs")
    sessions.rename(other, "theirs", "renamed")
    found = {r.common_dir: [i.session.name for i in r.sessions] for r in sessions.list_everywhere()}
    assert found == {ctx.common_dir: ["mine"], other.common_dir: ["renamed"]}


def test_list_everywhere_forgets_deleted_repos_and_reports_broken_ones(
    ctx: RepoContext, tmp_path: Path
) -> None:
    gone_repo = make_repo(tmp_path / "gone")
    sessions.create(discover(gone_repo, env={}), "lost")
    sessions.create(ctx, "mine")
    git(tmp_path, "init", "-q", "broken")
    broken = discover(tmp_path / "broken", env={})
    UserIndex(index_path()).add(broken.state_dir, broken.common_dir)
    broken.state_dir.mkdir()
    broken.registry_path.write_bytes(b"garbage" * 200)
    shutil.rmtree(gone_repo)
    repos = sessions.list_everywhere()
    assert [r.common_dir for r in repos] == sorted([ctx.common_dir, broken.common_dir])
    assert next(r for r in repos if r.common_dir == broken.common_dir).error
    assert len(UserIndex(index_path()).repos()) == 2


def test_a_symlinked_path_to_the_repository_is_the_same_worktree(
    ctx: RepoContext, repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "link").symlink_to(repo)
    via_link = discover(tmp_path / "link", env={})
    made = sessions.create(via_link, "x")
    assert made.worktree == repo
    assert [i.here for i in sessions.list_sessions(ctx, env={})] == [True]
