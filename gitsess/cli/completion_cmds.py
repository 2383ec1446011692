"""`gitsess completion SHELL`: the script that makes a shell complete gitsess's words."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from gitsess.cli.group import cli

# The variable click reads in the process the shell's completion function starts.
COMPLETE_VAR = "_GITSESS_COMPLETE"


@cli.command(
    epilog="bash: in ~/.bashrc; zsh: in ~/.zshrc; fish: gitsess completion fish >"
    " ~/.config/fish/completions/gitsess.fish"
)
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell code that completes commands, options and names (sessions, archives,
    agent kinds, roles)."""
    found = get_completion_class(shell)
    assert found is not None  # click ships all three
    click.echo(found(cli, {}, "gitsess", COMPLETE_VAR).source())
