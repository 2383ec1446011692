"""Talking to git remotes through libgit2: which remote, credentials, fetch, push, progress.

A remote is a configured name (`origin`) or a URL or path; nothing here runs `git`. Credentials
are offered in order, each at most once per connection (libgit2 asks again after a refusal,
and would otherwise loop): for SSH the user name, the keys of the running ssh agent, then the
default key files of `~/.ssh`; for HTTP(S) `$GITSESS_TOKEN` (user `$GITSESS_USERNAME`, else the
URL's, else `git`), then git's credential helpers (`credential.helper`), asked with git's
credential protocol: only `get`, so gitsess never stores or erases a credential, and a helper
named by a bare name is found as `git-credential-<name>` on PATH or in git's usual exec dirs,
since `git` itself is never run. Fetches take objects only, into no local ref.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import pygit2
from pygit2.enums import CredentialType

from gitsess.errors import GitsessError

TOKEN_ENV = "GITSESS_TOKEN"
USERNAME_ENV = "GITSESS_USERNAME"
# Where git installs `git-credential-<name>` helpers (git's exec path, which only `git` itself
# could tell us); PATH is searched first.
_HELPER_DIRS = ("/usr/lib/git-core", "/usr/libexec/git-core", "/usr/local/libexec/git-core")
_SSH_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
_HELPER_TIMEOUT = 60

T = TypeVar("T")
Credential = pygit2.Username | pygit2.Keypair | pygit2.UserPass


class Progress(Protocol):
    """Told how a transfer goes; the command line draws it."""

    def received(self, objects: int, total: int, nbytes: int) -> None: ...

    def sent(self, objects: int, total: int, nbytes: int) -> None: ...


@dataclass(frozen=True)
class Remote:
    label: str  # the name, or the URL as given
    url: str
    remote: pygit2.remotes.Remote
    config: pygit2.Config  # of the repository it was opened from: credential helpers


def open_remote(repo: pygit2.Repository, spec: str | None, *, branch: str | None = None) -> Remote:
    """The remote `spec` names: a configured remote, else a URL or a path.

    Without `spec`: the remote `branch` tracks (`branch.<name>.remote`), else `origin`, else the
    only remote there is.
    """
    names = [n for n in repo.remotes.names() if n is not None]
    if spec is None:
        spec = _default_remote(repo, names, branch)
    if spec in names:
        remote = repo.remotes[spec]
        url = remote.url or spec
        if _relative_path(url):
            # git reads it from the top of the worktree; libgit2 from the current directory
            top = Path(repo.workdir) if repo.workdir else Path(repo.path)
            url = str((top / url).resolve())
            remote = repo.remotes.create_anonymous(url)
        return Remote(spec, url, remote, repo.config)
    if not is_url(spec):
        known = ", ".join(names) or "none"
        raise GitsessError(f"no remote {spec!r} (configured remotes: {known}); or give a URL")
    # libgit2 reads a relative path from wherever the process stands: make it explicit
    url = str(Path(spec).resolve()) if Path(spec).exists() else spec
    return Remote(spec, url, repo.remotes.create_anonymous(url), repo.config)


def is_url(spec: str) -> bool:
    """Whether `spec` reads as a URL or a path rather than a remote's name: it has a `/` or a
    `:`, or starts with `.`, or is a repository here."""
    if "/" in spec or ":" in spec or spec.startswith("."):
        return True
    return (Path(spec) / "HEAD").is_file() or (Path(spec) / ".git").exists()


def _relative_path(url: str) -> bool:
    return not url.startswith("/") and ":" not in url


def _default_remote(repo: pygit2.Repository, names: list[str], branch: str | None) -> str:
    if branch is not None:
        try:
            tracked = repo.config[f"branch.{branch}.remote"]
        except KeyError:
            tracked = None
        if tracked in names:
            return str(tracked)
    if "origin" in names:
        return "origin"
    if len(names) == 1:
        return names[0]
    raise GitsessError(
        "no remote given and none to assume (no origin"
        + (f"; configured: {', '.join(names)}" if names else ", no remotes configured")
        + "); name one"
    )


def fetch(
    remote: Remote,
    refs: Sequence[str],
    *,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Fetch the objects of `refs` (full ref names; absent ones are skipped) without creating
    local refs. Returns what the remote advertised in that same connection: ref -> commit."""
    callbacks = Callbacks(remote, progress, env)
    if refs:
        _network(remote, lambda: remote.remote.fetch(list(refs), callbacks=callbacks))
        # the heads of the connection the fetch used: no second connection, no race with it
        heads = remote.remote.list_heads(connect=False)
    else:
        heads = _network(remote, lambda: remote.remote.list_heads(callbacks=callbacks))
    return {h.name: str(h.oid) for h in heads if h.name is not None}


def list_refs(
    remote: Remote, prefix: str, *, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The remote's refs under `prefix`: ref -> commit (nothing is downloaded)."""
    heads = fetch(remote, [], env=env)
    return {name: oid for name, oid in heads.items() if name.startswith(prefix)}


def push(
    remote: Remote,
    specs: Sequence[str],
    *,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Push `specs`; a ref the remote refuses (a hook, a non-fast-forward) is an error."""
    callbacks = Callbacks(remote, progress, env)
    _network(remote, lambda: remote.remote.push(list(specs), callbacks=callbacks))
    if callbacks.rejected:
        why = "; ".join(f"{ref}: {message}" for ref, message in callbacks.rejected)
        raise GitsessError(f"{remote.label} refused the push: {why}")


def _network(remote: Remote, call: Callable[[], T]) -> T:
    try:
        return call()
    except pygit2.GitError as e:
        raise GitsessError(f"{remote.label}: {e}") from e


class Callbacks(pygit2.RemoteCallbacks):
    """Credentials, progress and the remote's verdict on each pushed ref."""

    def __init__(
        self, remote: Remote, progress: Progress | None, env: Mapping[str, str] | None
    ) -> None:
        super().__init__()
        self.config = remote.config
        self.progress = progress
        self.env = os.environ if env is None else env
        self.offered: list[str] = []
        self.rejected: list[tuple[str, str]] = []

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> Credential:
        for label, make in self._candidates(url, username_from_url, allowed_types):
            if label in self.offered:
                continue
            self.offered.append(label)
            credential = make()
            if credential is not None:
                return credential
        tried = ", ".join(self.offered) or "nothing that this remote accepts"
        raise GitsessError(
            f"cannot authenticate to {url} (tried {tried}); for SSH load a key into ssh-agent, "
            f"for HTTPS set {TOKEN_ENV} (and {USERNAME_ENV}) or a git credential helper"
        )

    def _candidates(
        self, url: str, url_user: str | None, allowed: CredentialType
    ) -> Iterator[tuple[str, Callable[[], Credential | None]]]:
        if allowed & CredentialType.USERNAME:
            user = url_user or self.env.get(USERNAME_ENV) or "git"
            yield f"user name {user}", lambda: pygit2.Username(user)
        if allowed & CredentialType.SSH_KEY:
            user = url_user or "git"
            if self.env.get("SSH_AUTH_SOCK"):
                yield "the ssh agent's keys", lambda: pygit2.KeypairFromAgent(user)
            ssh_dir = Path(self.env.get("HOME", "~")).expanduser() / ".ssh"
            for name in _SSH_KEYS:
                key = ssh_dir / name
                if key.is_file() and key.with_suffix(".pub").is_file():
                    yield f"~/.ssh/{name}", _keypair(user, key)
        if allowed & CredentialType.USERPASS_PLAINTEXT:
            token = self.env.get(TOKEN_ENV)
            if token:
                user = self.env.get(USERNAME_ENV) or url_user or "git"
                yield f"${TOKEN_ENV}", lambda: pygit2.UserPass(user, token)
            for helper in credential_helpers(self.config):
                yield f"credential helper {helper!r}", _from_helper(helper, url, url_user, self.env)

    def transfer_progress(self, stats: pygit2.remotes.TransferProgress) -> None:
        if self.progress is not None:
            self.progress.received(stats.received_objects, stats.total_objects,
                                   stats.received_bytes)  # fmt: skip

    def push_transfer_progress(
        self, objects_pushed: int, total_objects: int, bytes_pushed: int
    ) -> None:
        if self.progress is not None:
            self.progress.sent(objects_pushed, total_objects, bytes_pushed)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message is not None:
            self.rejected.append((refname, message))


def _keypair(user: str, key: Path) -> Callable[[], Credential | None]:
    return lambda: pygit2.Keypair(user, str(key.with_suffix(".pub")), str(key), "")


def credential_helpers(config: pygit2.Config) -> list[str]:
    """`credential.helper` values in order; an empty value forgets those before it, as in git."""
    helpers: list[str] = []
    try:
        values = list(config.get_multivar("credential.helper"))
    except (KeyError, pygit2.GitError):
        return []
    for value in values:
        if value:
            helpers.append(value)
        else:
            helpers.clear()
    return helpers


def helper_command(helper: str, env: Mapping[str, str]) -> list[str] | None:
    """The command line git would run for `helper` with the `get` action, None when the
    helper's program is not installed. Like git: `!cmd` and absolute paths go through the
    shell, a bare name means the program `git-credential-<name>`."""
    if helper.startswith("!"):
        return ["sh", "-c", f"{helper[1:]} get"]
    if os.path.isabs(helper.split()[0]):
        return ["sh", "-c", f"{helper} get"]
    words = shlex.split(helper)
    program = f"git-credential-{words[0]}"
    search = os.pathsep.join([env.get("PATH", os.defpath), *_HELPER_DIRS])
    found = shutil.which(program, path=search)
    return None if found is None else [found, *words[1:], "get"]


def ask_helper(
    helper: str, url: str, user: str | None, env: Mapping[str, str]
) -> tuple[str, str] | None:
    """(user, password) from a credential helper, by git's credential protocol; None if it has
    none (or fails: the next way is tried)."""
    command = helper_command(helper, env)
    if command is None:
        return None
    parts = urlsplit(url)
    request = {"protocol": parts.scheme, "host": parts.netloc.rpartition("@")[2]}
    if parts.path.strip("/"):
        request["path"] = parts.path.strip("/")
    if user:
        request["username"] = user
    text = "".join(f"{k}={v}\n" for k, v in request.items()) + "\n"
    try:
        done = subprocess.run(
            command, input=text, capture_output=True, text=True, env=dict(env),
            timeout=_HELPER_TIMEOUT, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    answer = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    if "password" not in answer:
        return None
    return answer.get("username") or user or "git", answer["password"]


def _from_helper(
    helper: str, url: str, user: str | None, env: Mapping[str, str]
) -> Callable[[], Credential | None]:
    def make() -> Credential | None:
        found = ask_helper(helper, url, user, env)
        return None if found is None else pygit2.UserPass(*found)

    return make
