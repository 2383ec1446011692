"""The command that serves gitsess to agents: mcp."""

from __future__ import annotations

from gitsess.cli.group import cli


@cli.command("mcp")
def mcp_command() -> None:
    """Serve gitsess's tools to an agent over MCP (stdio); inside a session, for that session.

    Add it to an agent by hand with: claude mcp add gitsess -- gitsess mcp
    """
    from gitsess.cli import mcp_server

    mcp_server.serve()
