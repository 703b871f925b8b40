"""A Streamable HTTP MCP server written with the official Python SDK (`mcp` on PyPI), for
tests/mcp.rs: `python http_server.py PORT [--json]` serves http://127.0.0.1:PORT/mcp.
With --json it answers with JSON bodies instead of event streams."""

import asyncio
import sys

from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[1])
json_response = "--json" in sys.argv[2:]
server = FastMCP("pagent-http-test", host="127.0.0.1", port=port, json_response=json_response,
                 log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason given."""
    raise ValueError(reason)


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Reports progress once per step, 0.2 s apart."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.2)
    return "done"


server.run(transport="streamable-http")
