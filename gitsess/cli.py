"""Command line interface."""

import click


@click.group()
def cli() -> None:
    """Named, resumable, copy-on-write sessions over a git worktree."""


def main() -> None:
    cli()
