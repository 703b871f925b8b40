"""A Streamable HTTP MCP server written with the official Python SDK (`mcp` 1.x on PyPI) whose
tool needs a sign-in at a URL first, for tests/mcp/elicitation.rs:
`python url_server.py PORT` serves http://127.0.0.1:PORT/mcp.

Its tool `sign_in` raises the SDK's UrlElicitationRequiredError (-32042, elicitation
`sdk-sign-in`) until the user has signed in; on that first call the server says the
elicitation is complete (`send_elicit_complete`, on its own stream), as if the user had signed
in at once, and answers the next call with `signed in after N refusals`.

Its tool `sample` asks the client for a model reply with the SDK's `create_message` (a user
message, a system prompt, `maxTokens` 20, a model hint, and with `tools` a tool `weather`)
and answers with the reply's JSON as the SDK read it."""

import sys

from mcp import UrlElicitationRequiredError
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import (ElicitRequestURLParams, ModelHint, ModelPreferences, SamplingMessage,
                       TextContent, Tool)

port = int(sys.argv[1])
server = FastMCP("pagent-url-test", host="127.0.0.1", port=port, log_level="WARNING")
state = {"signed_in": False, "refusals": 0}


@server.tool()
async def sign_in(ctx: Context) -> str:
    """Needs a sign-in."""
    if state["signed_in"]:
        return f"signed in after {state['refusals']} refusals"
    state["refusals"] += 1
    state["signed_in"] = True
    await ctx.session.send_elicit_complete("sdk-sign-in")
    raise UrlElicitationRequiredError([ElicitRequestURLParams(
        message="Sign in to go on", url="https://example.com/sign-in",
        elicitationId="sdk-sign-in")], "Sign in first")


@server.tool()
async def sample(ctx: Context, tools: bool = False) -> str:
    """Asks the client's model."""
    extra = {"tools": [Tool(name="weather", description="The weather in a city.",
                            inputSchema={"type": "object"})]} if tools else {}
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text="Hi?"))],
        max_tokens=20, system_prompt="Be brief.",
        model_preferences=ModelPreferences(hints=[ModelHint(name="small")]), **extra)
    return result.model_dump_json(by_alias=True, exclude_none=True)


server.run(transport="streamable-http")
