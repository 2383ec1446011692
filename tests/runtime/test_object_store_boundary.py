"""The boundary of a session's object store (`overlay/objectdir.py`), tried as a hostile process
in a run would: the real store is read-only below the session, nothing a run plants in its own
store leads gitsess to write outside it or to read (and promote) what is not the session's own
object, and no run writes another session's store, nor its own when it is read-only."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from gitsess.git.repo import discover
from gitsess.overlay import objectdir
from tests.live_util import unmount_all
from tests.services.test_session_objects import dot_git, fsck_clean
from tests.util import commit, git, gitsess

pytestmark = pytest.mark.fuse


def run(repo: Path, session: str, script: str, *extra: str) -> str:
    """`gitsess run` of `script`, which must succeed; its output."""
    done = gitsess(repo, "run", "-s", session, *extra, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done.stdout


def store(repo: Path, session: str) -> Path:
    shown = json.loads(gitsess(repo, "show", session, "--json").stdout)
    return discover(repo).session_dir(shown["id"]) / objectdir.STORE.decode()


def files(top: Path) -> dict[str, bytes]:
    """Every file below `top`, with its bytes (a symlink by its target)."""
    return {
        str(p.relative_to(top)): bytes(p.readlink()) if p.is_symlink() else p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.fixture
def worked(repo: Path) -> Path:
    """The repository with a second commit, its objects loose."""
    commit(repo, "second.txt", "two\n", "second")
    return repo


def test_a_run_cannot_change_the_real_store_by_the_path_its_alternates_name(
    worked: Path,
) -> None:
    head = git(worked, "rev-parse", "HEAD")
    obj = f"$real/{head[:2]}/{head[2:]}"
    attempts = {
        "write": "echo x > $real/planted",
        "mkdir": "mkdir $real/zz",
        "chmod": f"chmod 666 {obj}",
        "touch": f"touch {obj}",
        "rename-over": f"printf junk > .git/objects/junk && mv -f .git/objects/junk {obj}",
        "rename-away": f"mv {obj} $real/moved",
        "unlink": f"rm -f {obj}",
        "link": f"ln {obj} $real/linked",
        "remount": "mount -o remount,rw,bind $real",
        "unmount": "umount $real",
    }
    script = "real=$(cat .git/objects/info/alternates); " + "".join(
        f"{{ {cmd}; }} 2>/dev/null && echo crossed-{what}; " for what, cmd in attempts.items()
    )
    # git inside works meanwhile, its objects in the session's store
    script += "echo n > n.txt && git add n.txt && git commit -qm inside && git rev-parse HEAD"
    before = dot_git(worked)
    out = run(worked, "exp", script)
    assert "crossed" not in out
    inside = out.split()[-1]
    assert (store(worked, "exp") / inside[:2] / inside[2:]).is_file()
    assert dot_git(worked) == before
    assert fsck_clean(worked)


def test_a_store_pointed_elsewhere_leaves_gitsess_reading_the_real_one(
    worked: Path, tmp_path: Path
) -> None:
    """A run that makes its alternates name another store (empty of the real objects) and its
    `.git/objects` a symlink to the real store's own path (which a run cannot reach: the view
    is there) breaks only git in the session; gitsess reads the real objects where they are
    and the session's from its store."""
    other = tmp_path / "other.git"
    script = (
        "echo own > own.txt && git add own.txt && git commit -qm own && "
        f"git init -q --bare {other} && "
        f"echo {other}/objects > .git/objects/info/alternates && "
        f"rm .git/objects && ln -s {worked}/.git/objects .git/objects && "
        "echo edited > second.txt; git log -1 2>/dev/null || echo broken"
    )
    before = dot_git(worked)
    assert run(worked, "exp", script).split() == ["broken"]
    assert dot_git(worked) == before
    diff = gitsess(worked, "diff", "exp", "--name-only")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.split() == ["own.txt", "second.txt"]
    assert json.loads(gitsess(worked, "show", "exp", "--json").stdout)["commits"] == 1
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "edited")
    assert applied.returncode == 0, applied.stderr
    assert git(worked, "log", "--format=%s", "-3").splitlines() == ["edited", "own", "second"]
    assert fsck_clean(worked)


# What a run plants in its store for the object its commit needs: a symlink to a good copy
# of it (so only following it would find it), a fan-out dir or pack dir that is a symlink to
# one kept elsewhere, an alternate store that holds it, another object's bytes under its name.
PLANTS = {
    "loose symlink": "cp $f $away/o && rm $f && ln -s $away/o $f",
    "fan-out symlink": "mv $fan $away/fan && ln -s $away/fan $fan",
    "pack symlink": (
        "git repack -q -d -l && mv .git/objects/pack $away/pack && "
        "ln -s $away/pack .git/objects/pack"
    ),
    "alternates": (
        "git init -q --bare $away/alt.git && cp -r $fan $away/alt.git/objects/ && rm $f && "
        "echo $away/alt.git/objects >> .git/objects/info/alternates"
    ),
    "forged": "t=$(git rev-parse HEAD^{tree}) && rm $f && cp .git/objects/${t%${t#??}}/${t#??} $f",
}


@pytest.mark.parametrize("plant", PLANTS.values(), ids=PLANTS.keys())
def test_what_a_run_plants_in_its_store_is_not_promoted(
    worked: Path, tmp_path: Path, plant: str
) -> None:
    away = tmp_path / "away"
    away.mkdir()
    script = (
        "echo own > own.txt && git add own.txt && git commit -qm own && echo later > own.txt && "
        "b=$(git rev-parse HEAD:own.txt) && fan=.git/objects/${b%${b#??}} && f=$fan/${b#??} && "
        f"away={shlex.quote(str(away))} && {plant}"
    )
    run(worked, "exp", script)
    before = dot_git(worked)
    applied = gitsess(worked, "apply", "exp", "--commit", "-m", "own")
    assert applied.returncode != 0
    assert applied.stderr.startswith("gitsess: ") and "Traceback" not in applied.stderr
    assert dot_git(worked) == before
    assert fsck_clean(worked)


@pytest.mark.parametrize(
    "plant",
    ["rm -r .git/objects/info && ln -s $real_info .git/objects/info",
     "echo /tmp > .git/objects/info/alternates && "
     "ln -s $real_info/planted .git/objects/info/alternates.new"],
    ids=["info dir", "aside file"],
)  # fmt: skip
def test_a_symlink_in_the_store_leads_no_write_of_gitsess_out_of_it(
    worked: Path, plant: str
) -> None:
    """gitsess writes the store's `info/alternates` when it loads the session (a daemon as it
    starts, a command reading it offline): a symlink a run planted on the way (here to the real
    store's `info`) is replaced, not followed."""
    real_info = shlex.quote(str(worked / ".git" / "objects" / "info"))
    before = dot_git(worked)
    run(worked, "exp", f"real_info={real_info} && {plant}")
    unmount_all(worked)
    assert gitsess(worked, "show", "exp").returncode == 0
    assert run(worked, "exp", "git log -1 --format=%s") == "second\n"
    assert dot_git(worked) == before


def test_another_sessions_store_is_read_only_in_a_run(worked: Path) -> None:
    run(worked, "other", "echo o > o.txt && git add o.txt && git commit -qm o")
    theirs = store(worked, "other")
    before = files(theirs)
    script = (
        f"cd {shlex.quote(str(theirs))} && "
        "{ echo x > planted; } 2>/dev/null || echo no-write; "
        "rm -rf ?? 2>/dev/null || echo no-rm; "
        "{ echo /tmp > info/alternates; } 2>/dev/null || echo no-alternates"
    )
    assert run(worked, "exp", script).split() == ["no-write", "no-rm", "no-alternates"]
    assert files(theirs) == before
    assert run(worked, "other", "git fsck --no-dangling && git log -1 --format=%s") == "o\n"


def test_a_read_only_run_cannot_write_its_own_store(worked: Path) -> None:
    run(worked, "exp", "echo o > o.txt && git add o.txt && git commit -qm o")
    ours = store(worked, "exp")
    before = files(ours)
    script = (
        "git log -1 --format=%s; "
        "echo x | git hash-object -w --stdin 2>/dev/null || echo no-object; "
        "rm -rf .git/objects/?? 2>/dev/null || echo no-rm; "
        "{ echo x > .git/objects/planted; } 2>/dev/null || echo no-write"
    )
    out = run(worked, "exp", script, "--read-only")
    assert out.split() == ["o", "no-object", "no-rm", "no-write"]
    assert files(ours) == before
