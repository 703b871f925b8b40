"""A small stdio MCP server (python3 standard library only) for tests/mcp.rs.

`python3 fake_server.py MODE [PIDFILE]`: MODE `ok` is a well-behaved server; every other
mode misbehaves at `initialize` in one way, but `endless-pages`, whose `tools/list` never
ends. Calls of the tools `die` and `babble` (not
listed) exit and write garbage mid-call; `ask` sends the client two requests of its own;
`late-stateless` answers its first `server/discover` late and refuses `initialize`; `hang` is never answered; `flood` stops reading and sends pings; `deaf` stops reading and stays silent; `unaddressed` sends an error with a `null` id
before its answer; `where` answers with its working directory and the variable
`PAGENT_MCP_TEST` of its environment, as JSON; `cancelled` answers with the params of every
`notifications/cancelled` the server received so far, as JSON; `metas` answers with the
method and `params._meta` of every message it received so far. The pid is written to
PIDFILE, so a test can check that no process is left behind.
"""

import json
import os
import sys
import time

MODE = sys.argv[1]
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))

out = sys.stdout.buffer


def send(message):
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def answer(id, result):
    send({"jsonrpc": "2.0", "id": id, "result": result})


TOOLS = [
    {"name": "echo", "description": "Echoes its text.",
     "inputSchema": {"$schema": "https://json-schema.org/draft/2020-12/schema",
                     "type": "object",
                     "properties": {"text": {"type": "string", "minLength": 1,
                                             "description": "What to echo."}},
                     "required": ["text"], "additionalProperties": False,
                     "x-vendor": {"nested": [1, 2.5, None]}}},
    {"name": "slow", "description": "Reports progress, then answers.",
     "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer"}}}},
    {"name": "grow", "description": "Adds a tool and tells the client.",
     "inputSchema": {"type": "object"}},
]


def initialize(id):
    if MODE == "garbage":
        out.write(b"\x00\xff\xfe garbage \x80\n")
        out.flush()
    elif MODE == "not-json":
        out.write(b"Server starting on stdio...\n")
        out.flush()
    elif MODE == "unknown-id":
        answer(id + 1000, {})
    elif MODE == "oversize":
        answer(id, {"padding": "x" * (1 << 20)})
    elif MODE == "exit-during-initialize":
        sys.stderr.write("fatal: no configuration found\n")
        sys.stderr.flush()
        sys.exit(3)
    elif MODE == "hang":
        pass
    elif MODE == "chatty-exit":
        # Far more than the client keeps: only the end is wanted.
        for n in range(20000):
            sys.stderr.write(f"noise line {n}\n")
        sys.stderr.write("fatal: the last words\n")
        sys.stderr.flush()
        sys.exit(4)
    elif MODE == "old-version":
        answer(id, {"protocolVersion": "2023-01-01", "capabilities": {}})
    else:
        answer(id, {"protocolVersion": "2025-03-26", "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "fake", "version": "1.0"}})


CANCELLED = []
DISCOVERED = []
LATE_DISCOVERED = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
                   "serverInfo": {"name": "late", "version": "1"}}
METAS = []

for line in sys.stdin:
    message = json.loads(line)
    id, method = message.get("id"), message.get("method")
    params = message.get("params") or {}
    METAS.append({"method": method, "_meta": params.get("_meta")})
    if method == "notifications/cancelled":
        CANCELLED.append(params)
    elif method == "server/discover" and MODE == "late-stateless":
        # A stateless server slow to start: its first answer comes only after the client's
        # probe gave up (with the `initialize` that follows it, however long that took);
        # `initialize` it refuses, naming the revision it speaks.
        DISCOVERED.append(id)
        if len(DISCOVERED) > 1:
            answer(id, LATE_DISCOVERED)
    elif method == "initialize" and MODE == "late-stateless":
        if DISCOVERED:
            answer(DISCOVERED[0], LATE_DISCOVERED)
        send({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32022, "message": "this server speaks only 2026-07-28",
            "data": {"supported": ["2026-07-28"], "requested": params.get("protocolVersion")}}})
    elif method == "server/discover" and MODE != "hang":
        # As session-era servers answer a request they do not know before `initialize`.
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "initialize":
        initialize(id)
    elif method == "ping":
        answer(id, {})
    elif method == "tools/list" and MODE == "endless-pages":
        # A page of one tool with a 100 KB description, and always another cursor.
        index = int(params.get("cursor") or 0)
        tool = {"name": f"t{index}", "description": "x" * 100_000, "inputSchema": {"type": "object"}}
        answer(id, {"tools": [tool], "nextCursor": str(index + 1)})
    elif method == "tools/list":
        # One tool per page, to exercise pagination.
        index = int(params.get("cursor") or 0)
        page = {"tools": TOOLS[index:index + 1]}
        if index + 1 < len(TOOLS):
            page["nextCursor"] = str(index + 1)
        answer(id, page)
    elif method == "tools/call":
        name, args = params["name"], params.get("arguments") or {}
        token = (params.get("_meta") or {}).get("progressToken")
        if name == "echo":
            answer(id, {"content": [{"type": "text", "text": args["text"]}]})
        elif name == "slow":
            for step in range(1, args.get("steps", 3) + 1):
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": step,
                                 "total": args.get("steps", 3), "message": f"step {step}"}})
                time.sleep(0.01)
            answer(id, {"content": [{"type": "text", "text": "done"}]})
        elif name == "grow":
            TOOLS.append({"name": "extra", "description": "Appeared later.",
                          "inputSchema": {"type": "object"}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            answer(id, {"content": [{"type": "text", "text": "grown"}]})
        elif name == "ask":
            # Requests of the server to the client, answered before the call's own answer.
            send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
            send({"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage", "params": {}})
            answers = [json.loads(sys.stdin.readline()) for _ in range(2)]
            answer(id, {"content": [{"type": "text", "text": json.dumps(answers, sort_keys=True)}]})
        elif name == "die":
            sys.stderr.write("dying mid-call\n")
            sys.stderr.flush()
            sys.exit(5)
        elif name == "hang":
            pass
        elif name == "where":
            found = {"cwd": os.getcwd(), "PAGENT_MCP_TEST": os.environ.get("PAGENT_MCP_TEST")}
            answer(id, {"content": [{"type": "text", "text": json.dumps(found)}]})
        elif name == "cancelled":
            answer(id, {"content": [{"type": "text", "text": json.dumps(CANCELLED)}]})
        elif name == "metas":
            answer(id, {"content": [{"type": "text", "text": json.dumps(METAS)}]})
        elif name == "unaddressed":
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            answer(id, {"content": [{"type": "text", "text": "after"}]})
        elif name == "flood":
            # Stops reading its stdin and sends pings until its output is closed (at most a
            # million, some 50 MB).
            try:
                for n in range(1_000_000):
                    send({"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"})
            except (BrokenPipeError, OSError):
                pass
            sys.exit(0)
        elif name == "deaf":
            # Says so in a progress notification, then stops reading its stdin and never
            # answers (the client ends it).
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 1, "message": "deaf now"}})
            time.sleep(60)
            sys.exit(0)
        elif name == "babble":
            out.write(b"\x00\xff not a message\n")
            out.flush()
        else:
            send({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": f"unknown tool {name}"}})
