"""Crafted remotes: session commits and archives that no push made, built by hand with git's
plumbing (which, unlike `git add`, writes any tree). Each must be refused with one line and
nothing made, or shown for what it is; nothing here needs a mount."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gitsess.git import dotgit
from tests.util import git, gitsess, make_repo

SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
# `.git` as git's verify_path refuses it: any case, NTFS's trailing dots and spaces, its short
# name and stream syntax, HFS+'s ignorable code points.
SPELLINGS = [
    ".git", ".GIT", ".Git", ".gIt", ".git.", ".git ", ".GIT. .", "git~1", "GIT~1",
    ".git::$INDEX_ALLOCATION", ".g\u200cit", ".\u200dgit", "\ufeff.GIT", ".git\u206f",
]  # fmt: skip
FSMONITOR = '[core]\n\tfsmonitor = "echo PWNED >> {canary}; false"\n'


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    seed = make_repo(tmp_path / "seed")
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    return bare


@pytest.fixture
def here(tmp_path: Path, origin: Path) -> Path:
    """A clone of the remote, where the crafted sessions are pulled."""
    path = tmp_path / "here"
    git(tmp_path, "clone", "-q", str(origin), str(path))
    return path


def _blob(repo: Path, data: bytes) -> str:
    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
        check=True,
    )  # fmt: skip
    return done.stdout.decode().strip()


class Oid(str):
    """An object that is there already: a gitlink's commit, a blob of the base."""


def _tree(repo: Path, entries: dict[str, tuple[str, bytes | str]]) -> str:
    """A tree from {path: (mode, content)}, nested as the paths say (an `Oid` as content names
    the object). Written by `git mktree`, which checks no names."""
    top: dict[bytes, tuple[str, str]] = {}
    below: dict[str, dict[str, tuple[str, bytes | str]]] = {}
    for path, (mode, content) in entries.items():
        head, _, rest = path.partition("/")
        if rest:
            below.setdefault(head, {})[rest] = (mode, content)
        elif isinstance(content, Oid):
            top[head.encode()] = (f"{mode} {'commit' if mode == '160000' else 'blob'}", content)
        else:
            data = content.encode() if isinstance(content, str) else content
            top[head.encode()] = (f"{mode} blob", _blob(repo, data))
    for head, sub in below.items():
        top[head.encode()] = ("040000 tree", _tree(repo, sub))
    lines = b"".join(
        f"{kind} {oid}\t".encode() + name + b"\0" for name, (kind, oid) in sorted(top.items())
    )
    done = subprocess.run(["git", "mktree", "-z"], cwd=repo, input=lines, capture_output=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def forge(
    origin: Path,
    ref_name: str,
    entries: dict[str, tuple[str, bytes | str]],
    *,
    name: str | None = None,
    kv: bool = False,
    prefix: str = "refs/gitsess/sessions/",
    archive: bool = False,
) -> str:
    """A session commit (or, with `archive`, an archive) over the remote's main with the
    files of main plus `entries`, under `prefix + ref_name`; its `Gitsess-Name` trailer says
    `name` (default: `ref_name`)."""
    base = git(origin, "rev-parse", "main")
    files: dict[str, tuple[str, bytes | str]] = {}
    for line in git(origin, "ls-tree", "-r", "main").splitlines():
        mode, _, oid, path = line.replace("\t", " ", 1).split(" ", 3)
        files[path] = (mode, Oid(oid))
    tree = _tree(origin, {**files, **entries})
    title = "archive of session" if archive else "session"
    trailers = [f"Gitsess-Session: {SESSION}", f"Gitsess-Name: {name or ref_name}",
                "Gitsess-Branch: main", "Gitsess-Runs: 1"]  # fmt: skip
    if archive:
        trailers.append("Gitsess-Worktree: /nonexistent")
    if kv:
        trailers.append("Gitsess-Kv: .gitsess/kv.json")
    message = f"gitsess {title} {name or ref_name}\n\n" + "\n".join(trailers) + "\n"
    commit = subprocess.run(
        ["git", "commit-tree", tree, "-p", base, "-F", "-"],
        cwd=origin, input=message, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(origin, "update-ref", prefix + ref_name, commit)
    return commit


def refused(here: Path, *args: str) -> str:
    """Run gitsess expecting a refusal: exit 1, one line, no traceback; its message."""
    done = gitsess(here, *args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("gitsess: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def nothing_made(here: Path) -> None:
    listed = gitsess(here, "ls", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout or "[]") == [], listed.stdout
    assert git(here, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(here, "status", "--porcelain") == ""


# ---------------------------------------------------------------------------------------------
# the rule itself


@pytest.mark.parametrize("name", SPELLINGS)
def test_every_spelling_of_dotgit_is_git_s_own(name: str) -> None:
    assert dotgit.is_dotgit(name) and dotgit.is_dotgit(name.encode())
    assert dotgit.refused(f"sub/{name}/config") and dotgit.refused(name)


@pytest.mark.parametrize(
    "name", [".gitignore", ".gitattributes", "git", ".gi", "..git", ".git-x", "x.git", "gitx~1",
             ".g\u00eft", "\u200c", ".gitmodules"],
)  # fmt: skip
def test_names_that_only_look_like_it_are_content(name: str) -> None:
    assert not dotgit.is_dotgit(name) and not dotgit.refused(f"sub/{name}")


def test_what_verify_path_refuses_beside_dotgit() -> None:
    assert dotgit.refused("a//b") and dotgit.refused("./a") and dotgit.refused("a/../b")
    assert dotgit.refused("") and dotgit.refused("/a") and dotgit.refused(b"a\\.git\\x")
    assert dotgit.refused(".gitmodules", symlink=True) and dotgit.refused("GITMO~1", symlink=True)
    assert not dotgit.refused(".gitmodules") and not dotgit.refused(b"bad\xff")


# ---------------------------------------------------------------------------------------------
# pull


@pytest.mark.parametrize("name", SPELLINGS)
def test_a_nested_git_in_any_spelling_is_refused_and_nothing_is_made(
    origin: Path, here: Path, tmp_path: Path, name: str
) -> None:
    canary = tmp_path / "canary"
    forge(origin, "x", {
        "sub/README": ("100644", "looks harmless\n"),
        f"sub/{name}/HEAD": ("100644", "ref: refs/heads/main\n"),
        f"sub/{name}/config": ("100644", FSMONITOR.format(canary=canary)),
        f"sub/{name}/objects/.keep": ("100644", ""),
        f"sub/{name}/refs/heads/.keep": ("100644", ""),
    })  # fmt: skip
    err = refused(here, "pull", "x")
    assert repr(f"sub/{name}/config") in err and "refused, nothing was taken" in err
    nothing_made(here)
    assert not (here / "sub").exists()
    assert not canary.exists()


def test_the_top_level_git_is_refused_too(origin: Path, here: Path) -> None:
    forge(origin, "x", {".git/hooks/post-checkout": ("100755", "#!/bin/sh\necho PWNED\n"),
                        "ok.txt": ("100644", "x\n")})  # fmt: skip
    assert "'.git/hooks/post-checkout'" in refused(here, "pull", "x")
    nothing_made(here)


def test_a_nested_git_in_the_commits_made_inside_is_refused(origin: Path, here: Path) -> None:
    """The commits made inside a session become its index: their tree is checked as well."""
    inside = forge(origin, "inner", {"sub/.GIT/config": ("100644", "[core]\n")})
    base = git(origin, "rev-parse", "main")
    tree = git(origin, "rev-parse", "main^{tree}")
    message = (
        f"gitsess session x\n\nGitsess-Session: {SESSION}\nGitsess-Name: x\n"
        f"Gitsess-Branch: main\nGitsess-Head: {inside}\n"
    )
    commit = subprocess.run(
        ["git", "commit-tree", tree, "-p", base, "-p", inside, "-F", "-"],
        cwd=origin, input=message, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(origin, "update-ref", "refs/gitsess/sessions/x", commit)
    assert "'sub/.GIT/config'" in refused(here, "pull", "x")
    nothing_made(here)


def test_a_gitlink_is_refused_in_one_line(origin: Path, here: Path) -> None:
    forge(origin, "x", {"vendor/lib": ("160000", Oid("1" * 40)), "ok.txt": ("100644", "x\n")})
    assert "'vendor/lib'" in refused(here, "pull", "x")
    nothing_made(here)


@pytest.mark.parametrize(
    "content",
    [b"not json", b"\xff\xfe\xfa", b"[1, 2]", b'{"\\udcff": 1}', b'{"k": "\\ud800"}', b'{"": 1}'],
)
def test_a_bad_key_value_store_is_refused_in_one_line(
    origin: Path, here: Path, content: bytes
) -> None:
    forge(origin, "x", {".gitsess/kv.json": ("100644", content), "ok.txt": ("100644", "x\n")},
          kv=True)  # fmt: skip
    refused(here, "pull", "x")
    nothing_made(here)


def test_a_sound_crafted_session_still_pulls(origin: Path, here: Path) -> None:
    """The rule takes no more than it must: names that only look like `.git` are content."""
    forge(origin, "x", {"docs/.gitkeep": ("100644", ""), "a/git~2/f": ("100644", "f\n"),
                        ".gitsess/kv.json": ("100644", '{"k": 1}')}, kv=True)  # fmt: skip
    done = gitsess(here, "pull", "x")
    assert done.returncode == 0, done.stderr
    assert "2 changed file(s), 1 key(s)" in done.stdout
    names = gitsess(here, "diff", "x", "--name-only").stdout.split()
    assert names == ["a/git~2/f", "docs/.gitkeep"]


# ---------------------------------------------------------------------------------------------
# trailers that disagree with the ref


def test_ls_remote_shows_the_ref_and_flags_a_spoofed_name(origin: Path, here: Path) -> None:
    forge(origin, "s1", {"a.txt": ("100644", "a\n")})
    forge(origin, "zz-spoof", {"b.txt": ("100644", "b\n")}, name="s1")
    forge(origin, "pwn", {"c.txt": ("100644", "c\n")}, name="../../pwn")
    done = gitsess(here, "ls", "--remote", "--json")
    assert done.returncode == 0, done.stderr
    listed = {r["name"]: r["claims"] for r in json.loads(done.stdout)}
    assert listed == {"pwn": "../../pwn", "s1": None, "zz-spoof": "s1"}
    table = gitsess(here, "ls", "--remote").stdout
    assert "zz-spoof (its commit says 's1')" in table
    assert table.count("s1") == 2  # its own row, and the flag on zz-spoof's

    done = gitsess(here, "pull", "pwn")  # by the name the listing gives
    assert done.returncode == 0, done.stderr
    assert "calls itself session '../../pwn'; it is pwn here" in done.stderr
    assert [s["name"] for s in json.loads(gitsess(here, "ls", "--json").stdout)] == ["pwn"]


# ---------------------------------------------------------------------------------------------
# restore


@pytest.mark.parametrize("name", [".git", ".GIT", "git~1", ".g\u200cit"])
def test_a_crafted_archive_is_refused_by_restore(here: Path, name: str) -> None:
    git(here, "checkout", "-q", "main")
    forge(here, "old", {f"lib/{name}/config": ("100644", "[core]\n")},
          prefix="refs/gitsess/archive/", archive=True)  # fmt: skip
    err = refused(here, "restore", "old")
    assert repr(f"lib/{name}/config") in err and "archive old" in err
    nothing_made(here)
    assert git(here, "rev-parse", "--verify", "-q", "refs/gitsess/archive/old")  # kept
