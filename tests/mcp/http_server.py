"""A Streamable HTTP MCP server written with the official Python SDK (`mcp` on PyPI), for
tests/mcp.rs: `python http_server.py PORT [--json]` serves http://127.0.0.1:PORT/mcp.
With --json it answers with JSON bodies instead of event streams; with --no-get it answers
the GET for the server's own stream with 405 Method Not Allowed, as a server that offers none.
The tool `gets` says how many GET requests the server has seen."""

import asyncio
import sys

import uvicorn

from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[1])
json_response = "--json" in sys.argv[2:]
no_get = "--no-get" in sys.argv[2:]
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


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `extra` and announces it on the server's own stream (the GET stream, as
    a notification outside any request), then pings the client there: the ping's answer
    comes after the client read the announcement, so it has when this returns."""

    def extra() -> str:
        """Added by grow."""
        return "extra"

    server.add_tool(extra)
    await ctx.session.send_tool_list_changed()
    await ctx.session.send_ping()
    return "grown"


GETS = 0


@server.tool()
def gets() -> int:
    """How many GET requests the server has seen."""
    return GETS


app = server.streamable_http_app()


async def counting(scope, receive, send):
    global GETS
    if scope["type"] == "http" and scope["method"] == "GET":
        GETS += 1
        if no_get:
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"POST, DELETE")]})
            await send({"type": "http.response.body", "body": b""})
            return
    await app(scope, receive, send)


# `--tls CERT KEY`: https with that certificate (tests/data/tls).
tls = {}
if "--tls" in sys.argv[2:]:
    at = sys.argv.index("--tls")
    tls = {"ssl_certfile": sys.argv[at + 1], "ssl_keyfile": sys.argv[at + 2]}
uvicorn.run(counting, host="127.0.0.1", port=port, log_level="warning", **tls)
