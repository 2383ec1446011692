"""Agent profiles: how one CLI's state is moved into an isolation root.

Profiles are data: the TOML tables shipped next to this module, then the user's
`$XDG_CONFIG_HOME/gitsess/agents.toml`, then the repository's `<state-dir>/agents.toml`. A later
table of a known kind overrides the keys it gives; a new table adds a kind.

Keys: `description`, `aliases`, `command` (run when none is given), the lever (`env = "VAR"`,
or `args` inserted after the program with `{root}`), `source` (where the shared originals live;
the lever's variable, when set, wins), `seeds` (paths in the source, globs allowed),
`env_allow` (globs of the caller's variables the agent sees; none: all), `mcp_args` or
`mcp_env` (how the CLI is pointed at gitsess's MCP server, never by editing the user's own
config) and `turn_hook`. HOME-lever profiles also link `.gitconfig` and `.config/git`, so git
inside the agent keeps the user's identity; they unset XDG's base directories (`XDG_HOMES`), so
a tool that follows those keeps its state below the role's HOME too.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path, PurePosixPath

from gitsess.errors import GitsessError
from gitsess.git.repo import RepoContext

ROOT_MARK = "{root}"
KEYS = (
    "description", "aliases", "command", "env", "args", "source", "seeds", "env_allow",
    "turn_hook", "mcp_args", "mcp_env",
)  # fmt: skip
# Where `turn_hook` arguments find the hooks that make a checkpoint per agent turn.
TURN_HOOKS_FILE = "gitsess-turn-hooks.json"
# In `mcp_args`: the path of the JSON file naming gitsess's MCP server (`mcpServers`), and
# the same server as an inline TOML table (for `codex -c mcp_servers.gitsess=...`).
MCP_CONFIG_MARK = "{mcp_config}"
MCP_TOML_MARK = "{mcp_toml}"

# XDG's base directories of a user's own files (not XDG_RUNTIME_DIR: sockets, not state).
XDG_HOMES = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")

_KIND = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Lever:
    """What points the CLI at its isolation root: an environment variable, or arguments."""

    env: str | None = None
    args: tuple[str, ...] = ()  # inserted after the program; `{root}` is the root

    def apply(
        self, argv: list[str], env: Mapping[str, str], root: Path
    ) -> tuple[list[str], dict[str, str]]:
        out = dict(env)
        if self.env is not None:
            out[self.env] = str(root)
        if self.env == "HOME":
            # XDG's base directories are below HOME unless set; set (to the user's), every
            # role of a tool that follows them kept its state in the one same place.
            for name in XDG_HOMES:
                out.pop(name, None)
        if self.args and argv:
            # Right after the program: the option is the CLI's own, not a subcommand's.
            argv = [argv[0], *(a.replace(ROOT_MARK, str(root)) for a in self.args), *argv[1:]]
        return argv, out

    def to_json(self) -> str:
        return json.dumps({"env": self.env} if self.env else {"args": list(self.args)})

    @classmethod
    def from_json(cls, text: str) -> Lever:
        data = json.loads(text)
        return cls(env=data.get("env"), args=tuple(data.get("args", ())))

    def describe(self) -> str:
        return (
            f"{self.env}=<root>" if self.env else " ".join(self.args).replace(ROOT_MARK, "<root>")
        )


@dataclass(frozen=True)
class Profile:
    kind: str
    description: str
    aliases: tuple[str, ...]
    command: tuple[str, ...]  # what runs when `gitsess run --agent KIND` is given no command
    lever: Lever
    source: str  # where the shared originals live: `~/...` or absolute
    seeds: tuple[str, ...]  # paths relative to the source (globs allowed), linked into the root
    origin: str  # the file that defined it last, for messages
    # Names (globs) of the caller's environment variables the agent sees; empty: all of them.
    # gitsess's own (the session's, the lever's, the git config it adds) are always set.
    env_allow: tuple[str, ...] = ()
    # Arguments (after the program) that load `{root}/TURN_HOOKS_FILE`, Claude Code settings
    # whose hooks make a checkpoint at each prompt: empty for a CLI without such hooks.
    turn_hook: tuple[str, ...] = ()
    # How the CLI is told of gitsess's MCP server: arguments (with MCP_CONFIG_MARK or
    # MCP_TOML_MARK), or an environment variable set to the JSON file's path.
    mcp_args: tuple[str, ...] = ()
    mcp_env: str | None = None

    def visible_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """What of the caller's environment the agent's command gets (see `env_allow`)."""
        if not self.env_allow:
            return dict(env)
        return {k: v for k, v in env.items() if any(fnmatchcase(k, p) for p in self.env_allow)}

    def source_dir(self, env: Mapping[str, str]) -> Path:
        """Where the originals are: where the lever's variable points now, else `source`.

        A user who already moved the CLI's state (`CODEX_HOME=/elsewhere`) shares that state.
        """
        if self.lever.env and env.get(self.lever.env):
            return Path(env[self.lever.env]).absolute()
        return expand_home(self.source, env)


def expand_home(path: str, env: Mapping[str, str]) -> Path:
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME")
        if not home:
            raise GitsessError(f"cannot expand {path}: HOME is not set")
        return Path(home) / path[2:]
    return Path(path)


@dataclass(frozen=True)
class Profiles:
    by_kind: dict[str, Profile]

    def get(self, kind: str) -> Profile:
        found = self.by_kind.get(kind) or next(
            (p for p in self.by_kind.values() if kind in p.aliases), None
        )
        if found is None:
            known = ", ".join(
                sorted([*self.by_kind, *(a for p in self.by_kind.values() for a in p.aliases)])
            )
            raise GitsessError(
                f"unknown agent kind {kind!r} (known: {known}); define it in an agents.toml"
            )
        return found


def config_paths(ctx: RepoContext, env: Mapping[str, str]) -> list[Path]:
    """The user's file, then the repository's (which wins)."""
    config_home = env.get("XDG_CONFIG_HOME") or str(expand_home("~/.config", env))
    return [Path(config_home) / "gitsess" / "agents.toml", ctx.state_dir / "agents.toml"]


def load(ctx: RepoContext, env: Mapping[str, str]) -> Profiles:
    tables: dict[str, tuple[dict[str, object], str]] = {}
    shipped = resources.files(__package__ or "gitsess.services.agents")
    for item in sorted(shipped.iterdir(), key=lambda i: i.name):
        if item.name.endswith(".toml"):
            _merge(tables, _parse(item.read_text(), f"gitsess/agents/{item.name}"), item.name)
    for path in config_paths(ctx, env):
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise GitsessError(f"cannot read {path}: {e.strerror}") from e
        _merge(tables, _parse(text, str(path)), str(path))
    return Profiles({kind: _profile(kind, t, origin) for kind, (t, origin) in tables.items()})


def _parse(text: str, origin: str) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GitsessError(f"{origin}: {e}") from e


def _merge(
    tables: dict[str, tuple[dict[str, object], str]], data: dict[str, object], origin: str
) -> None:
    for kind, table in data.items():
        if not isinstance(table, dict):
            raise GitsessError(f"{origin}: {kind!r} must be a table ([{kind}])")
        base = dict(tables[kind][0]) if kind in tables else {}
        if "env" in table or "args" in table:
            # A lever replaces the lever: an env var and arguments never combine.
            base.pop("env", None)
            base.pop("args", None)
        tables[kind] = ({**base, **table}, origin)


def _profile(kind: str, t: dict[str, object], origin: str) -> Profile:
    where = f"{origin}: [{kind}]"
    if not _KIND.fullmatch(kind):
        raise GitsessError(f"{where}: a kind is 1-32 lowercase letters, digits, '-' or '_'")
    unknown = sorted(set(t) - set(KEYS))
    if unknown:
        raise GitsessError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    description = t.get("description", "")
    source = t.get("source")
    if not isinstance(description, str):
        raise GitsessError(f"{where}: description must be a string")
    if not isinstance(source, str) or not (source == "~" or source.startswith(("~/", "/"))):
        raise GitsessError(f"{where}: source must be an absolute path or start with ~/")
    env = t.get("env")
    args = _strings(t, "args", where)
    if (env is None) == (not args):
        raise GitsessError(f'{where}: give exactly one lever, env = "VAR" or args = [...]')
    if env is not None and not (isinstance(env, str) and _ENV_NAME.fullmatch(env)):
        raise GitsessError(f"{where}: env must be an environment variable name")
    if args and not any(ROOT_MARK in a for a in args):
        raise GitsessError(f"{where}: args must mention {ROOT_MARK}")
    seeds = _strings(t, "seeds", where)
    for seed in seeds:
        parts = PurePosixPath(seed).parts
        if not seed or seed.startswith("/") or ".." in parts or parts in ((), (".",)):
            raise GitsessError(f"{where}: seed {seed!r} must be a path inside the source")
    return Profile(
        kind=kind,
        description=description,
        aliases=_strings(t, "aliases", where),
        command=_strings(t, "command", where),
        lever=Lever(env=env if isinstance(env, str) else None, args=args),
        source=source,
        seeds=seeds,
        origin=origin,
        env_allow=_strings(t, "env_allow", where),
        turn_hook=_strings(t, "turn_hook", where),
        mcp_args=_strings(t, "mcp_args", where),
        mcp_env=_mcp_env(t, where),
    )


def _mcp_env(t: dict[str, object], where: str) -> str | None:
    value = t.get("mcp_env")
    if value is not None and not (isinstance(value, str) and _ENV_NAME.fullmatch(value)):
        raise GitsessError(f"{where}: mcp_env must be an environment variable name")
    return value if isinstance(value, str) else None


def _strings(t: dict[str, object], key: str, where: str) -> tuple[str, ...]:
    value = t.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GitsessError(f"{where}: {key} must be a list of strings")
    return tuple(str(v) for v in value)
