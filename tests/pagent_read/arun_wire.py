#!/usr/bin/env python3
"""Runs pagent 0.7.30's v1 `Agent.arun_wire` against pagent's mock OpenAI server and writes
its lines to stdout as they come (flushed per line), for tests/pagent_read.rs.

After the first `TextDelta` line it waits for a line on stdin before the run goes on: the
test sends one once the Rust mirror has shown that delta, so the mirror is seen following
the run while it is still going.

The agent is the one of make_captures.py (tests/data/pagent-wire, from ../shared), so the
lines equal the committed capture `v1_<scenario>.jsonl`.

usage: arun_wire.py SCENARIO     (a model name of mock_openai_server.py: text, tool, ...)
"""
import asyncio
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "pagent-wire"
sys.path.insert(0, str(DATA))

# Traffic to the loopback mock server only.
for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
    os.environ.pop(k, None)
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

import mock_openai_server  # noqa: E402
import pagent  # noqa: E402


def echo_impl(text: str) -> str:
    """Echo the given text back.

    Args:
        text: text to return unchanged
    """
    return text


async def main(scenario):
    srv, base = mock_openai_server.start_in_thread()
    try:
        echo = pagent.tool(name="echo")(echo_impl)
        llm = pagent.LLM(scenario, base_url=base, apikey="sk-mock")
        agent = pagent.Agent(llm, pagent.Session("You are a test agent."), tools=[echo],
                             max_turns=24)
        waited = False
        async for line in agent.arun_wire("Say hello."):
            sys.stdout.write(line)
            sys.stdout.flush()
            if not waited and '"method": "TextDelta"' in line:
                waited = True
                loop = asyncio.get_running_loop()
                await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), 60)
    finally:
        srv.shutdown()
        srv.server_close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
