"""A small session-era stdio MCP server (python3 standard library only) that asks the user
questions in the middle of its tool calls (`elicitation/create`), for tests/mcp/elicitation.rs.

`python3 elicit_server.py`. Its one tool, `ask`, takes
- `questions` (default 1): how many questions it sends at once, before it reads any answer;
- `schema`: `"good"` (a form with a required `name` and a `polite` boolean defaulting to true),
  `"bad"` (a nested object, no form) or `"url"` (a URL-mode question);
- `leave` (default false): exit right after sending the questions, as a server that
  disconnects while the user is answering;
- `complete` (default false): once every question is answered, say that a stranger's
  elicitation and each URL question are complete (`notifications/elicitation/complete`).
It answers the call with the JSON list of what each question got back (a result or an error),
in the order it sent them.

Its tool `sign_in` needs the user to sign in at a URL first: until then a call is refused with
a URLElicitationRequiredError (-32042, elicitation `sign-in-N` for the Nth refusal), and, when
the argument `complete` (default true) is true, the server then says that a stranger's
elicitation and `sign-in-N` are complete (`notifications/elicitation/complete`), as if the
user had signed in, and answers the next call with `signed in after N refusals`.

Its tool `sample` asks the client for a model reply (`sampling/createMessage`, or the
argument `method` instead, such as `roots/list`) with the argument `request` as the params, and answers with the JSON of what it got back (a result, or
`{"error": ..}`). With `--stateless` the server speaks 2026-07-28: it answers `server/discover`,
and `sample` asks in an `input_required` result (input request `model`, with a
`requestState`), answering the retry with the JSON of its `inputResponses.model` and the
`requestState` it echoed.
"""

import json
import sys

out = sys.stdout.buffer


def send(message):
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


SCHEMAS = {
    "good": {"type": "object",
             "properties": {"name": {"type": "string", "minLength": 1},
                            "polite": {"type": "boolean", "default": True}},
             "required": ["name"]},
    "bad": {"type": "object", "properties": {"address": {"type": "object",
            "properties": {"street": {"type": "string"}}}}},
}


def question(n, schema):
    if schema == "url":
        return {"mode": "url", "message": f"Sign in ({n})", "url": "https://example.com/sign-in",
                "elicitationId": f"sign-in-{n}"}
    return {"message": f"What is your name? ({n})", "requestedSchema": SCHEMAS[schema]}


lines = iter(sys.stdin)
signed_in, refusals = False, 0
stateless = "--stateless" in sys.argv[1:]
for line in lines:
    message = json.loads(line)
    id, method = message.get("id"), message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "asker", "version": "1.0"}}})
    elif method == "server/discover" and stateless:
        send({"jsonrpc": "2.0", "id": id, "result": {
            "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "asker", "version": "1.0"}}})
    elif method == "server/discover":
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "ask", "description": "Asks the user.", "inputSchema": {"type": "object"}},
            {"name": "sign_in", "description": "Needs a sign-in.",
             "inputSchema": {"type": "object"}},
            {"name": "sample", "description": "Asks for a model reply.",
             "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call" and params.get("name") == "sample":
        def reply(got):
            text = json.dumps(got, sort_keys=True, separators=(",", ":"))
            send({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": text}]}})
        asked = (params.get("arguments") or {}).get("request")
        # Another question of the client's instead, such as `roots/list`.
        question = (params.get("arguments") or {}).get("method", "sampling/createMessage")
        if stateless and "inputResponses" in params:
            reply({"got": params["inputResponses"].get("model"),
                   "state": params.get("requestState")})
        elif stateless:
            send({"jsonrpc": "2.0", "id": id, "result": {
                "resultType": "input_required", "requestState": "opaque-1",
                "inputRequests": {"model": {"method": question, "params": asked}}}})
        else:
            qid = f"s{id}"
            send({"jsonrpc": "2.0", "id": qid, "method": question, "params": asked})
            for answer in lines:
                answer = json.loads(answer)
                if answer.get("id") == qid and "method" not in answer:
                    reply(answer.get("result", {"error": answer.get("error")}))
                    break
    elif method == "tools/call" and params.get("name") == "sign_in":
        if signed_in:
            send({"jsonrpc": "2.0", "id": id, "result": {"content": [
                {"type": "text", "text": f"signed in after {refusals} refusals"}]}})
            continue
        refusals += 1
        eid = f"sign-in-{refusals}"
        send({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32042, "message": "Sign in first", "data": {"elicitations": [
                {"mode": "url", "message": "Sign in to go on", "url": "https://example.com/sign-in",
                 "elicitationId": eid}]}}})
        if (params.get("arguments") or {}).get("complete", True):
            for done in ("someone-else", eid):
                send({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                      "params": {"elicitationId": done}})
            signed_in = True
    elif method == "tools/call":
        args = params.get("arguments") or {}
        count, schema = args.get("questions", 1), args.get("schema", "good")
        asked = [f"q{id}-{n}" for n in range(1, count + 1)]
        for n, qid in enumerate(asked, 1):
            send({"jsonrpc": "2.0", "id": qid, "method": "elicitation/create",
                  "params": question(n, schema)})
        if args.get("leave"):
            sys.exit(0)
        got = {}
        # Bounded: the client answers each question once; anything else is read on.
        for reply in lines:
            reply = json.loads(reply)
            if reply.get("id") in asked and "method" not in reply:
                got[reply["id"]] = reply.get("result", {"error": reply.get("error")})
                if len(got) == len(asked):
                    break
        if args.get("complete"):
            done = ["someone-else"] + [question(n, schema).get("elicitationId")
                                       for n in range(1, count + 1)]
            for eid in filter(None, done):
                send({"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                      "params": {"elicitationId": eid}})
        text = json.dumps([got.get(qid) for qid in asked], sort_keys=True, separators=(",", ":"))
        send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}})
