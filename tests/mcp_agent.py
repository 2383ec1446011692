"""A fake agent: starts `gitsess mcp` with the MCP SDK's own client over stdio (a real
subprocess), makes the calls given as JSON on argv[1] ([[tool, arguments], ...]), and prints
one JSON line: [[is_error, answer], ...] (an answer is the tool's JSON, or an error's text).
The server's stderr goes to argv[2]."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def calls(plan: list[list[Any]], errlog: str) -> list[list[Any]]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gitsess", "mcp"], env=dict(os.environ)
    )
    answers: list[list[Any]] = []
    with open(errlog, "a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            for name, arguments in plan:
                if name == "list_tools":
                    listed = await client.list_tools()
                    answers.append([False, sorted(t.name for t in listed.tools)])
                    continue
                result = await client.call_tool(name, arguments)
                text = "".join(getattr(c, "text", "") for c in result.content)
                answers.append([result.is_error, text if result.is_error else json.loads(text)])
    return answers


if __name__ == "__main__":
    sys.stdout.write(json.dumps(anyio.run(calls, json.loads(sys.argv[1]), sys.argv[2])) + "\n")
