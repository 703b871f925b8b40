#!/usr/bin/env python3
"""Runs pagent 0.7.30's v1 `Agent.arun_wire` (or, with `--v4`, pagentv4's
`Runner.run(return_type="acp")`) against pagent's mock OpenAI server and writes its lines to
stdout as they come (flushed per line), for tests/pagent_read.rs.

After the first `TextDelta` line it waits for a line on stdin before the run goes on: the
test sends one once the Rust mirror has shown that delta, so the mirror is seen following
the run while it is still going.

The agents are those of make_captures.py (tests/data/pagent-wire, from ../shared), so the
lines equal the committed capture `v1_<scenario>.jsonl` (`v4_<scenario>.jsonl`).

usage: arun_wire.py [--v4] SCENARIO   (a model name of mock_openai_server.py: text, tool, ...)
"""
import asyncio
import os
import sys
import tempfile
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


async def v1_lines(base, scenario):
    echo = pagent.tool(name="echo")(echo_impl)
    llm = pagent.LLM(scenario, base_url=base, apikey="sk-mock")
    agent = pagent.Agent(llm, pagent.Session("You are a test agent."), tools=[echo],
                         max_turns=24)
    async for line in agent.arun_wire("Say hello."):
        yield line


async def v4_lines(base, scenario):
    import pagentv4

    echo = pagentv4.tool(name="echo")(echo_impl)
    provider = pagentv4.Provider(scenario, base_url=base, apikey="sk-mock")
    with tempfile.TemporaryDirectory(prefix="pagentv4-threads-") as root:
        runner = await pagentv4.Runner.create(
            f"t-{scenario}", provider, root=root,
            overrides={"backend": "none", "system": "You are a test agent."},
            tools=[echo], max_turns=24)
        try:
            async for line in runner.run("Say hello.", return_type="acp"):
                yield line
        finally:
            await runner.close()


async def main(v4, scenario):
    srv, base = mock_openai_server.start_in_thread()
    try:
        lines = v4_lines(base, scenario) if v4 else v1_lines(base, scenario)
        waited = False
        async for line in lines:
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
    args = sys.argv[1:]
    v4 = args[:1] == ["--v4"]
    asyncio.run(main(v4, args[-1]))
