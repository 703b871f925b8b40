"""A server on the official Python SDK, major version 2 (`mcp` 2.x, dual-era: it serves the
stateless 2026-07-28 revision and the session era's `initialize`), for tests/mcp.rs.

`python sdk2_server.py stdio` or `python sdk2_server.py http PORT`. It has:
- the tool `add(a, b)` with a structured result (an output schema);
- the tool `greet`, whose `name` is asked of the user (elicitation: a form), in the era's
  way (an `input_required` result, or a request of the server mid-call);
- the tool `touch`, which announces that the resource `note://hello` changed;
- the resources `note://hello` (text) and the template `note://{name}`;
- the prompt `review(code)`, a user message and an assistant message.
"""

import sys
from typing import Annotated

from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.prompts.base import AssistantMessage, UserMessage

server = MCPServer("sdk2-test", instructions="Tools for pagent's tests.")


class Sum(BaseModel):
    total: int


@server.tool(description="Adds two integers.", title="Add")
def add(a: int, b: int) -> Sum:
    return Sum(total=a + b)


class Name(BaseModel):
    name: str
    polite: bool = True


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@server.tool(description="Greets the user by the name they give.")
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    return f"Hello, {who.name}{'!' if who.polite else '.'}"


@server.tool(description="Says the note changed.")
async def touch(ctx: Context) -> str:
    await ctx.notify_resource_updated("note://hello")
    try:
        await ctx.session.send_resource_updated("note://hello")
    except Exception:  # noqa: BLE001 - the stateless era has no session to send on
        pass
    return "touched"


@server.resource("note://hello", description="A note.", mime_type="text/plain")
def hello() -> str:
    return "hello from the note"


@server.resource("note://{name}", description="A note by name.")
def note(name: str) -> str:
    return f"the note {name}"


@server.prompt(description="Asks for a review of some code.")
def review(code: str) -> list:
    return [UserMessage(f"Review this code:\n{code}"), AssistantMessage("I will review it.")]


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
