"""A small stdio MCP server (python3 standard library only) for the ACP tests (tests/acp.rs).

`python3 mcp_server.py MODE [TOOL...]`: lists the named tools (default `echo`). MODE `ok`
answers everything; `stall-list` never answers `tools/list`; `linger` does not exit when its
stdin closes (it waits for a signal, a minute at most). With `PIDFILE` in its environment it
writes its pid there. The tools: `echo` answers its
`text`; `env` answers with its whole environment, as JSON; `plan` answers with a result that
has a `plan` member beside its content; any other name answers its own name.
"""

import json
import os
import sys
import time

MODE = sys.argv[1]
NAMES = sys.argv[2:] or ["echo"]
out = sys.stdout.buffer
if os.environ.get("PIDFILE"):
    with open(os.environ["PIDFILE"], "w") as f:
        f.write(str(os.getpid()))


def send(message):
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def answer(id, result):
    send({"jsonrpc": "2.0", "id": id, "result": result})


def text(t):
    return {"content": [{"type": "text", "text": t}]}


for line in sys.stdin:
    message = json.loads(line)
    id, method = message.get("id"), message.get("method")
    params = message.get("params") or {}
    if method == "server/discover":
        # As session-era SDK servers answer a request they do not know before `initialize`.
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize":
        answer(id, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "acp-test", "version": "1.0"}})
    elif method == "ping":
        answer(id, {})
    elif method == "tools/list":
        if MODE == "stall-list":
            continue
        answer(id, {"tools": [{"name": n, "description": f"The {n} tool.",
                               "inputSchema": {"type": "object"}} for n in NAMES]})
    elif method == "tools/call":
        name, args = params["name"], params.get("arguments") or {}
        if name == "echo":
            answer(id, text(args.get("text", "")))
        elif name == "env":
            answer(id, text(json.dumps(dict(os.environ), sort_keys=True)))
        elif name == "plan":
            result = text("planned")
            result["plan"] = [{"content": "step one", "priority": "high", "status": "pending"}]
            answer(id, result)
        else:
            answer(id, text(name))

if MODE == "linger":
    time.sleep(60)
