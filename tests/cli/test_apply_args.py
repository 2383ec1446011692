"""The pieces of diff/apply/discard that need no session: argument rules, pathspecs, pruning."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from gitsess.cli.apply_cmds import parse_author
from gitsess.cli.diff_cmds import colour_patch
from gitsess.cli.pathspec_args import split_positional
from gitsess.errors import GitsessError
from gitsess.services.apply import root_pathspecs
from gitsess.services.apply_journal import droppable

SESSIONS = {"exp", "both"}
PATHS = {"src", "both", "README.md"}


def split(*args: str, after: list[str] | None = None, explicit: bool = False) -> object:
    return split_positional(
        args,
        after,
        explicit=explicit,
        is_session=SESSIONS.__contains__,
        is_path=PATHS.__contains__,
    )


def test_first_argument_is_the_session_when_it_names_one() -> None:
    assert split("exp", "src") == ("exp", ["src"])
    assert split("src", "README.md") == (None, ["src", "README.md"])
    assert split() == (None, [])
    assert split("*.py") == (None, ["*.py"])
    assert split(":!src") == (None, [":!src"])


def test_with_the_session_given_as_an_option_every_argument_is_a_pathspec() -> None:
    assert split("exp", "both", explicit=True) == (None, ["exp", "both"])


def test_dashdash_separates_session_from_pathspecs() -> None:
    assert split("exp", after=["gone", "-1"]) == ("exp", ["gone", "-1"])
    assert split(after=["exp"]) == (None, ["exp"])
    with pytest.raises(click.UsageError, match="only the session goes before"):
        split("exp", "src", after=["x"])
    with pytest.raises(click.UsageError, match="only the session goes before"):
        split("exp", after=["x"], explicit=True)


def test_ambiguous_and_unknown_first_arguments_are_refused() -> None:
    with pytest.raises(click.UsageError, match="both a session and a path"):
        split("both")
    with pytest.raises(click.UsageError, match="neither a session nor a path"):
        split("typo", "src")


def test_pathspecs_are_made_relative_to_the_top(tmp_path: Path) -> None:
    top = tmp_path / "wt"
    mnt = tmp_path / "mnt"
    assert root_pathspecs(["a.py", ".", "../b", ":/c", ":!d", ":(top)e"], top / "src", [top]) == [
        "src/a.py",
        "src",
        "b",
        ":/c",
        ":!src/d",
        ":(top)e",
    ]
    assert root_pathspecs([":(exclude,glob)*.py"], top / "src", [top]) == [
        ":(exclude,glob)src/*.py"
    ]
    assert root_pathspecs(["x"], mnt / "lib", [top, mnt]) == ["lib/x"]
    assert root_pathspecs([str(top / "src" / "f")], tmp_path, [top]) == ["src/f"]
    assert root_pathspecs(["x"], tmp_path, [top]) == ["x"]  # outside: from the top
    with pytest.raises(GitsessError, match="outside the worktree"):
        root_pathspecs(["../../x"], top / "src", [top])
    with pytest.raises(GitsessError, match="outside the worktree"):
        root_pathspecs(["/etc/passwd"], top, [top])


def test_a_directory_leaves_the_delta_only_with_nothing_kept_below_it() -> None:
    paths = ["a", "a/b", "a/b/c", "d", "e/f"]
    assert droppable(paths, ["a/b/c"]) == ["d", "e/f"]
    assert droppable(paths, ["a/x"]) == ["a/b", "a/b/c", "d", "e/f"]
    assert droppable(paths, []) == paths
    assert droppable(paths, [""]) == []


def test_patch_colours_follow_git() -> None:
    patch = (
        b"diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n"
        b"@@ -1,2 +1,2 @@ ctx\n same\n--- removed dashes\n+added\n"
    )
    lines = colour_patch(patch).splitlines()
    assert lines[2] == b"\x1b[1m--- a/f\x1b[m"
    assert lines[4] == b"\x1b[36m@@ -1,2 +1,2 @@\x1b[m ctx"
    assert lines[5] == b" same"
    assert lines[6] == b"\x1b[31m--- removed dashes\x1b[m"
    assert lines[7] == b"\x1b[32m+added\x1b[m"


def test_author_parsing() -> None:
    sig = parse_author("Ada Lovelace <ada@example.com>")
    assert (sig.name, sig.email) == ("Ada Lovelace", "ada@example.com")
    with pytest.raises(click.BadParameter):
        parse_author("ada@example.com")
