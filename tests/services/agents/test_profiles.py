"""Profiles are data: the shipped TOML, the user's and the repository's agents.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext
from gitsess.services.agents.profiles import Lever, load

ENV = {"HOME": "/home/u"}


def user_config(home: Path, text: str) -> None:
    path = home / ".config" / "gitsess" / "agents.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_shipped_profiles_and_their_levers(ctx: RepoContext) -> None:
    profiles = load(ctx, ENV)
    levers = {kind: p.lever for kind, p in profiles.by_kind.items()}
    assert levers == {
        "claude": Lever(env="CLAUDE_CONFIG_DIR"),
        "cline": Lever(args=("--data-dir", "{root}")),
        "codex": Lever(env="CODEX_HOME"),
        "agy": Lever(env="HOME"),
        "gemini": Lever(env="HOME"),
        "hermes": Lever(env="HOME"),
        "home": Lever(env="HOME"),
    }
    agy = profiles.get("agy")
    assert agy.command == ("agy",) and profiles.get("gemini").command == ("gemini",)
    assert ".gemini/antigravity-cli/antigravity-oauth-token" in agy.seeds
    assert {".gemini/installation_id", ".gemini/state.json"} <= set(agy.seeds)
    cline = profiles.get("cline")
    assert cline.source_dir(ENV) == Path("/home/u/.cline/data")
    assert cline.seeds == ("settings/*", "globalState.json", "secrets.json")
    claude = profiles.get("claude")
    assert claude.seeds == (".credentials.json", "settings.json", "plugins")
    assert claude.source_dir(ENV) == Path("/home/u/.claude")
    hermes = profiles.get("hermes")
    assert {".hermes/auth.json", ".hermes/config.yaml", ".hermes/.env"} <= set(hermes.seeds)
    assert hermes.source_dir(ENV) == Path("/home/u")


def test_the_levers_variable_names_the_shared_originals(ctx: RepoContext) -> None:
    codex = load(ctx, ENV).get("codex")
    assert codex.source_dir({**ENV, "CODEX_HOME": "/srv/codex"}) == Path("/srv/codex")


def test_unknown_kind_lists_the_known(ctx: RepoContext) -> None:
    with pytest.raises(GitsessError, match=r"unknown agent kind 'nope' \(known: agy, claude"):
        load(ctx, ENV).get("nope")


def test_user_and_repository_files_override_and_extend(ctx: RepoContext, home: Path) -> None:
    user_config(
        home,
        """
        [claude]
        seeds = [".credentials.json"]
        [cline]
        env = "CLINE_DIR"
        [aider]
        description = "Aider"
        env = "HOME"
        source = "~"
        seeds = [".aider.conf.yml"]
        """,
    )
    (ctx.state_dir).mkdir(parents=True)
    (ctx.state_dir / "agents.toml").write_text('[aider]\nseeds = [".aider.conf.yml", ".env"]\n')
    profiles = load(ctx, {**ENV, "HOME": str(home)})
    claude = profiles.get("claude")
    assert claude.seeds == (".credentials.json",)
    assert claude.lever == Lever(env="CLAUDE_CONFIG_DIR")  # what the user left out stays
    assert profiles.get("cline").lever == Lever(env="CLINE_DIR")  # a lever replaces the lever
    aider = profiles.get("aider")
    assert aider.seeds == (".aider.conf.yml", ".env")  # the repository's file wins
    assert aider.description == "Aider"
    assert aider.origin == str(ctx.state_dir / "agents.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[x]\nenv = "HOME"\nsource = "~"\nseed = []\n', "unknown key 'seed'"),
        ('[x]\nsource = "~"\n', "exactly one lever"),
        ('[x]\nenv = "HOME"\nargs = ["{root}"]\nsource = "~"\n', "exactly one lever"),
        ('[x]\nargs = ["--dir"]\nsource = "~"\n', "args must mention {root}"),
        ('[x]\nenv = "A B"\nsource = "~"\n', "env must be an environment variable name"),
        ('[x]\nenv = "HOME"\nsource = "rel"\n', "source must be an absolute path"),
        ('[x]\nenv = "HOME"\nsource = "~"\nseeds = ["../up"]\n', "must be a path inside"),
        ('[x]\nenv = "HOME"\nsource = "~"\nseeds = ["/abs"]\n', "must be a path inside"),
        ('[x]\nenv = "HOME"\nsource = "~"\nseeds = "a"\n', "seeds must be a list of strings"),
        ('[X]\nenv = "HOME"\nsource = "~"\n', "a kind is 1-32 lowercase"),
        ("x = 1\n", "'x' must be a table"),
        ("[x\n", "agents.toml"),
    ],
)
def test_bad_profiles_name_the_file_and_the_problem(
    ctx: RepoContext, home: Path, text: str, message: str
) -> None:
    user_config(home, text)
    with pytest.raises(GitsessError, match=message) as raised:
        load(ctx, {"HOME": str(home)})
    assert str(home / ".config" / "gitsess" / "agents.toml") in str(raised.value)


def test_levers_apply_to_the_environment_or_the_arguments() -> None:
    root = Path("/r")
    argv, env = Lever(env="CODEX_HOME").apply(["codex", "resume"], {"A": "1"}, root)
    assert (argv, env) == (["codex", "resume"], {"A": "1", "CODEX_HOME": "/r"})
    argv, env = Lever(args=("--data-dir", "{root}")).apply(["cline", "task", "x"], {}, root)
    assert (argv, env) == (["cline", "--data-dir", "/r", "task", "x"], {})
    assert Lever(args=("--data-dir={root}",)).apply(["c"], {}, root)[0] == ["c", "--data-dir=/r"]
    assert Lever.from_json(Lever(args=("-d", "{root}")).to_json()) == Lever(args=("-d", "{root}"))
    assert Lever.from_json(Lever(env="HOME").to_json()).describe() == "HOME=<root>"
