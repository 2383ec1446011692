"""A session's object store is a directory of its own that borrows the real one read-only
(`overlay/objectdir.py`; issue 36 items 1-4, 15): what git writes or changes there stays in the
session, the real `.git` keeps every byte until an apply, and apply, push and rm's archive copy
in exactly the objects the session's commits need. (What a hostile run tries against the
boundary: tests/runtime/test_object_store_boundary.py.)"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.util import GITSESS, commit, git, gitsess, make_repo

pytestmark = pytest.mark.fuse


def run(repo: Path, session: str, script: str) -> subprocess.CompletedProcess[str]:
    return gitsess(repo, "run", "-s", session, "--", "sh", "-c", script)


def dot_git(repo: Path) -> dict[str, str]:
    """Every file below the real `.git` (objects included; the state dir of gitsess aside),
    with its mode and the digest of its bytes."""
    top = repo / ".git"
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        if Path(dirpath) == top and "gitsess" in dirnames:
            dirnames.remove("gitsess")
        for name in filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(top))] = (
                f"{st.st_mode:o}:{hashlib.sha256(path.read_bytes()).hexdigest()}"
            )
    return out


def fsck_clean(repo: Path) -> bool:
    done = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True)
    return done.returncode == 0 and not done.stdout


def loose_objects(repo: Path) -> set[str]:
    found = set()
    for d in (repo / ".git" / "objects").iterdir():
        if len(d.name) == 2 and d.is_dir():
            found |= {d.name + f.name for f in d.iterdir()}
    return found


@pytest.fixture
def worked(repo: Path) -> Path:
    """The repository with a second commit, as loose objects."""
    commit(repo, "second.txt", "two\n", "second")
    return repo


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A repository with 150 commits on `main` of its own history (so fetching it brings some
    450 objects: git keeps those as a pack, with index-pack), cloned by nothing yet."""
    up = make_repo(tmp_path / "upstream", {"u.txt": "0\n"})
    for i in range(150):
        (up / "u.txt").write_text(f"{i}\n")
        (up / f"f{i % 7}.txt").write_text(f"{i}\n")
        git(up, "add", "-A")
        git(up, "commit", "-q", "-m", f"u{i}")
    return up


# ---------------------------------------------------------------------------------------------
# item 1: real objects cannot be destroyed or changed from inside


def test_replacing_touching_and_chmod_of_real_objects_change_only_the_session(
    worked: Path,
) -> None:
    """The real store is read-only in a run; a file of the session's own of a real object's
    name (and its own commit-graph, pack dir) shadows the real one for git in the session only."""
    head = git(worked, "rev-parse", "HEAD")
    obj = f".git/objects/{head[:2]}/{head[2:]}"
    git(worked, "commit-graph", "write", "--reachable")
    before = dot_git(worked)
    script = (
        "real=$(cat .git/objects/info/alternates); "
        "chmod 666 $real/info/commit-graph 2>/dev/null || echo read-only; "
        "git commit-graph write --reachable && chmod 666 .git/objects/info/commit-graph && "
        "printf junk > .git/objects/info/commit-graph && touch .git/objects/pack/x.keep && "
        f"mkdir .git/objects/{head[:2]} && printf junk > .git/objects/{head[:2]}/tmp_x && "
        f"mv -f .git/objects/{head[:2]}/tmp_x {obj} && stat -c %a {obj} && cat {obj} && "
        "echo && git cat-file -t HEAD 2>/dev/null || echo shadowed"
    )
    done = run(worked, "exp", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["read-only", "644", "junk", "shadowed"]
    assert dot_git(worked) == before
    assert fsck_clean(worked)
    assert git(worked, "log", "--format=%s").splitlines() == ["second", "initial"]


def test_deleting_real_objects_inside_hides_them_from_the_session_only(worked: Path) -> None:
    before = dot_git(worked)
    done = run(worked, "exp", "rm -rf .git/objects && git log -1 2>&1; ls .git")
    assert "objects" not in done.stdout.split()
    assert dot_git(worked) == before
    assert fsck_clean(worked)


def test_git_inside_renames_its_new_objects_in(worked: Path) -> None:
    """git inside a run writes a loose object aside and renames it in (a link, then an unlink
    of the temporary name, were two FUSE requests more per object); nothing is left aside."""
    before = dot_git(worked)
    done = run(
        worked,
        "exp",
        "git config core.createObject && for i in 1 2 3; do echo $i > n$i; done"
        " && git add -A && git commit -q -m inside && git fsck --no-dangling"
        " && find .git/objects -name 'tmp_obj_*' && git cat-file -p HEAD:n2",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["rename", "2"]
    assert dot_git(worked) == before


def test_git_inside_a_run_never_repacks_on_its_own(worked: Path) -> None:
    """A commit inside starts no automatic maintenance, which past `gc.autoPackLimit` would
    repack the session's store on its own; an explicit `git gc` still packs, and only the
    session's own objects (the real ones stay borrowed, not copied in)."""
    head = git(worked, "rev-parse", "HEAD")
    git(worked, "config", "gc.autoPackLimit", "1")  # more than one pack is too many
    packs = "ls .git/objects/pack | grep -c 'pack$';"
    done = run(
        worked,
        "exp",
        "for i in 1 2; do echo p$i > p$i; git add p$i; git commit -q -m p$i; git repack -q -d -l;"
        f" done; {packs} for i in 1 2 3; do echo $i > n$i; git add n$i; git commit -q -m c$i;"
        f" done; {packs} git gc -q && {packs}"
        " git count-objects -v | sed -n 's/^in-pack: //p';"
        f" git rev-list --objects {head}..HEAD | wc -l",
    )
    assert done.returncode == 0, done.stderr
    counts = done.stdout.split()
    assert counts[:3] == ["2", "2", "1"]
    assert counts[3] == counts[4]  # the pack holds what the session's commits added, no more


def test_rm_rf_of_a_mounted_views_git_leaves_the_real_one(worked: Path, tmp_path: Path) -> None:
    before = dot_git(worked)
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(worked, "new", "exp").returncode == 0
    mounted = gitsess(worked, "mount", "exp", str(view))
    assert mounted.returncode == 0, mounted.stderr
    try:
        subprocess.run(["rm", "-rf", str(view / ".git")], capture_output=True, text=True)
        # everything goes, objects too (the sealed state dir keeps `.git` itself: ENOTEMPTY)
        assert os.listdir(view / ".git") == []
    finally:
        assert gitsess(worked, "umount", "exp").returncode == 0
    assert dot_git(worked) == before
    assert fsck_clean(worked)


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_a_fan_out_dir_pruned_inside_still_shows_real_objects_written_there_later(
    worked: Path,
) -> None:
    """`git repack -a -d && git prune` inside prune the session's store alone (its emptied
    fan-out dir goes, the real one stays); the session's HEAD still follows the real branch, and
    a real object that lands in that fan-out dir later is read at once, from the real store."""
    later = b"outside\n"
    fan_out, rest = blob_id(later)[:2], blob_id(later)[2:]
    # a loose object of the session's own in that fan-out dir first, unreachable (pruned)
    early = next(
        text for i in itertools.count() if blob_id(text := b"early %d\n" % i)[:2] == fan_out
    )
    before = dot_git(worked)
    done = run(
        worked,
        "exp",
        f"printf '{early.decode()}' | git hash-object -w --stdin >/dev/null && "
        f"ls .git/objects/{fan_out} && git repack -q -a -d && git prune && ls .git/objects",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[0] == blob_id(early)[2:]
    assert fan_out not in lines[1:]
    assert dot_git(worked) == before
    outside = commit(worked, "later.txt", later.decode(), "later")
    assert (worked / ".git" / "objects" / fan_out / rest).is_file()
    inside = run(
        worked,
        "exp",
        "git log -1 --format=%H && git cat-file -p HEAD:later.txt && "
        "git fsck --no-dangling --no-progress && "
        f"test -f $(cat .git/objects/info/alternates)/{fan_out}/{rest} && echo real && "
        "ls .git/objects",
    )
    assert inside.returncode == 0, inside.stderr
    lines = inside.stdout.split()
    assert lines[:3] == [outside, "outside", "real"]
    assert fan_out not in lines[3:]  # read where it is, not copied into the session


def test_a_fan_out_dir_found_missing_shows_when_the_real_repository_makes_it(
    worked: Path, tmp_path: Path
) -> None:
    """git in the view that just looked for a loose object, in a fan-out dir the real store
    lacked, finds it the moment the real repository wrote it: the real store is read
    natively, through the session's alternates, with nothing cached in between."""
    present = {p.name for p in (worked / ".git" / "objects").iterdir()}
    data = next(d for i in itertools.count() if blob_id(d := b"new %d\n" % i)[:2] not in present)
    oid = blob_id(data)
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(worked, "new", "exp").returncode == 0
    assert gitsess(worked, "mount", "exp", str(view)).returncode == 0
    try:
        looked = subprocess.run(["git", "cat-file", "-e", oid], cwd=view, capture_output=True)
        assert looked.returncode != 0
        assert git(worked, "hash-object", "-w", "--stdin", input=data) == oid
        assert git(view, "cat-file", "blob", oid, raw=True).encode() == data
        assert not (view / ".git" / "objects" / oid[:2]).exists()  # the session's store: none
    finally:
        assert gitsess(worked, "umount", "exp").returncode == 0


# ---------------------------------------------------------------------------------------------
# items 2, 3: fetch, gc, repack, maintenance and commit-graph work inside, as in a clone


def test_fetch_of_hundreds_of_objects_stays_in_the_session(worked: Path, upstream: Path) -> None:
    git(worked, "remote", "add", "up", str(upstream))
    before = dot_git(worked)
    done = run(
        worked,
        "exp",
        "git fetch -q up && git rev-list --count up/main && ls .git/objects/pack | grep -c idx"
        " && git merge -q --allow-unrelated-histories --no-edit up/main && cat f3.txt",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["151", "1", "143"]
    assert dot_git(worked) == before
    assert fsck_clean(worked)
    # the merge's commits reach the real repository with apply, every object they need too
    applied = gitsess(worked, "apply", "exp", "--commit", "--squash", "-m", "merged")
    assert applied.returncode == 0, applied.stderr
    assert (worked / "f3.txt").read_text() == "143\n"
    assert fsck_clean(worked)


@pytest.mark.parametrize(
    "script",
    [
        "git gc -q --prune=now",
        "git repack -q -a -d && git prune-packed",
        "git maintenance run --task=gc --task=commit-graph --task=loose-objects",
        "git repack -q -d && git commit-graph write --reachable && git multi-pack-index write",
        "git gc -q --aggressive && git count-objects -v | grep -q '^count: 0'",
    ],
)
def test_gc_and_repack_inside_work_and_leave_the_real_git_alone(worked: Path, script: str) -> None:
    done = run(worked, "exp", "echo x > x.txt && git add x.txt && git commit -qm inside")
    assert done.returncode == 0, done.stderr
    before = dot_git(worked)
    done = run(
        worked, "exp", f"{script} && git fsck --no-dangling --no-progress && git log --format=%s"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["inside", "second", "initial"]
    assert dot_git(worked) == before
    assert fsck_clean(worked)
    assert '"commits": 1' in gitsess(worked, "show", "exp", "--json").stdout
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "rest")
    assert applied.returncode == 0, applied.stderr
    assert git(worked, "log", "-1", "--format=%s") == "inside"
    assert fsck_clean(worked)


# ---------------------------------------------------------------------------------------------
# item 4: the real repository's gc cannot take the session's commits


def test_a_real_gc_leaves_the_sessions_commits(worked: Path) -> None:
    made = run(worked, "exp", "echo x > x.txt && git add x.txt && git commit -qm inside")
    assert made.returncode == 0, made.stderr
    git(worked, "reflog", "expire", "--expire=now", "--all")
    git(worked, "gc", "-q", "--prune=now")
    inside = run(worked, "exp", "git log --format=%s -1 && git fsck --no-dangling --no-progress")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout == "inside\n"
    diff = gitsess(worked, "diff", "exp", "--name-only")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.split() == ["x.txt"]
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "rest")
    assert applied.returncode == 0, applied.stderr
    assert git(worked, "log", "-1", "--format=%s") == "inside"
    assert fsck_clean(worked)


def test_a_real_gc_after_git_add_of_a_real_object_leaves_it_to_the_session(worked: Path) -> None:
    """`git add` of content the real store has freshens the real object (utime): the session
    then holds the object's bytes, so the real repository packing it away takes nothing."""
    git(worked, "hash-object", "-w", "--stdin", input=b"stray\n")  # loose and unreachable
    made = run(worked, "exp", "echo stray > s.txt && git add s.txt && git commit -qm s")
    assert made.returncode == 0, made.stderr
    git(worked, "gc", "-q", "--prune=now")
    inside = run(worked, "exp", "git fsck --no-dangling --no-progress && git show HEAD:s.txt")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout == "stray\n"


# ---------------------------------------------------------------------------------------------
# promotion: exactly what the commits need, and only when they leave the session


def test_apply_promotes_exactly_the_objects_the_commits_need(worked: Path) -> None:
    script = (
        "echo unused | git hash-object -w --stdin && "
        "echo a > a.txt && git add a.txt && git commit -qm a && git rev-parse HEAD HEAD^{tree}"
    )
    done = run(worked, "exp", script)
    assert done.returncode == 0, done.stderr
    unused, head, tree = done.stdout.split()
    blob = run(worked, "exp", "git rev-parse HEAD:a.txt").stdout.strip()
    real = loose_objects(worked)
    assert not {unused, head, tree, blob} & real
    dry = gitsess(worked, "apply", "exp", "--commit", "-m", "x", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert loose_objects(worked) == real
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "x")
    assert applied.returncode == 0, applied.stderr
    assert loose_objects(worked) - real == {head, tree, blob}
    assert git(worked, "rev-parse", "HEAD") == head
    assert fsck_clean(worked)


def test_push_promotes_the_sessions_commits(worked: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(worked, "remote", "add", "origin", str(remote))
    assert run(worked, "exp", "echo p > p.txt && git add p.txt && git commit -qm p").returncode == 0
    pushed = gitsess(worked, "push", "exp")
    assert pushed.returncode == 0, pushed.stderr
    assert fsck_clean(worked)
    assert fsck_clean(remote)


# ---------------------------------------------------------------------------------------------
# item 15: rm then restore brings the session back as it was


def test_rm_then_restore_brings_back_commits_kv_and_id(worked: Path) -> None:
    cmd = " ".join(GITSESS)
    made = run(
        worked,
        "exp",
        "echo 1 > c1.txt && git add c1.txt && git commit -qm c1 && "
        "echo 2 > c2.txt && git add c2.txt && git commit -qm c2 && "
        f"echo edited >> README.md && {cmd} kv set answer 42",
    )
    assert made.returncode == 0, made.stderr
    shown = json.loads(gitsess(worked, "show", "exp", "--json").stdout)
    assert gitsess(worked, "rm", "exp").returncode == 0
    restored = gitsess(worked, "restore", "exp")
    assert restored.returncode == 0, restored.stderr
    git(worked, "reflog", "expire", "--expire=now", "--all")
    git(worked, "gc", "-q", "--prune=now")  # the archive ref went with the restore
    again = json.loads(gitsess(worked, "show", "exp", "--json").stdout)
    assert again["id"] == shown["id"]
    assert again["commits"] == 2
    assert gitsess(worked, "kv", "exp", "get", "answer").stdout.strip() == "42"
    inside = run(worked, "exp", "git log --format=%s -3 && git status --porcelain")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.splitlines() == ["c2", "c1", "second", " M README.md"]
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "edit")
    assert applied.returncode == 0, applied.stderr
    assert git(worked, "log", "--format=%s", "-3").splitlines() == ["edit", "c2", "c1"]
    assert fsck_clean(worked)


def test_a_fork_keeps_the_commits_through_a_real_gc(worked: Path) -> None:
    assert run(worked, "exp", "echo f > f.txt && git add f.txt && git commit -qm f").returncode == 0
    assert gitsess(worked, "fork", "exp", "copy").returncode == 0
    assert gitsess(worked, "rm", "--force", "exp").returncode == 0
    git(worked, "reflog", "expire", "--expire=now", "--all")
    for ref in git(worked, "for-each-ref", "--format=%(refname)", "refs/gitsess/").split():
        git(worked, "update-ref", "-d", ref)
    git(worked, "gc", "-q", "--prune=now")
    inside = run(worked, "copy", "git log -1 --format=%s && git fsck --no-dangling --no-progress")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout == "f\n"
