"""Checks the spans examples/otlp exported, as the OTLP receiver got them (receiver.py).

The example makes three runs, each its own trace: `weather-desk` (two tool calls run in
parallel, then the answer, with contents), `failing` (the model call fails) and
`interrupted` (aborted while its first tool runs). For each, this checks the names, kinds,
nesting and attributes of the spans of OpenTelemetry's GenAI conventions.

    python check.py SPANS.jsonl
"""

import json
import sys

CONTENT = (
    "gen_ai.system_instructions",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


def fail(message):
    print(f"otel check: {message}", file=sys.stderr)
    sys.exit(1)


def expect(span, **attrs):
    """Each attribute (dots written `__`) has this value (None: is absent)."""
    for key, want in attrs.items():
        key = key.replace("__", ".")
        got = span["attributes"].get(key)
        if got != want:
            fail(f"{span['name']}: {key} is {got!r}, expected {want!r}")


def children(spans, parent):
    kids = [s for s in spans if s["parent_span_id"] == parent["span_id"]]
    for k in kids:
        if k["trace_id"] != parent["trace_id"]:
            fail(f"{k['name']} is in another trace than its parent")
    return sorted(kids, key=lambda s: s["start"])


def children_named(spans, parent, names):
    """The children of `parent`, which must be spans of these names in this order."""
    kids = children(spans, parent)
    if [k["name"] for k in kids] != names:
        fail(f"{parent['name']}: children {[k['name'] for k in kids]}, expected {names}")
    return kids


def run(spans, name):
    runs = [s for s in spans if s["attributes"].get("gen_ai.agent.name") == name]
    if len(runs) != 1:
        fail(f"{len(runs)} invoke_agent spans of {name}, expected 1")
    r = runs[0]
    if r["name"] != f"invoke_agent {name}" or r["kind"] != "SPAN_KIND_INTERNAL":
        fail(f"run {name}: {r['name']} {r['kind']}")
    if r["parent_span_id"]:
        fail(f"run {name} has a parent")
    if r["service"] != "pagent-otlp-example":
        fail(f"service name {r['service']!r}")
    expect(
        r,
        gen_ai__operation__name="invoke_agent",
        gen_ai__provider__name="faux",
        gen_ai__request__model="faux-1",
    )
    return r


def chat(span, finish, turn, status="STATUS_CODE_UNSET"):
    if span["name"] != "chat faux-1" or span["kind"] != "SPAN_KIND_CLIENT":
        fail(f"{span['name']} {span['kind']}: expected a chat span")
    expect(
        span,
        gen_ai__operation__name="chat",
        gen_ai__provider__name="faux",
        gen_ai__request__model="faux-1",
        gen_ai__request__stream=True,
        gen_ai__response__model="faux-1",
        gen_ai__response__finish_reasons=json.dumps([finish]),
        pagent__turn=turn,
    )
    if span["status"]["code"] != status:
        fail(f"chat of turn {turn}: status {span['status']}")


def tool(span, name, call_id, error=None):
    if span["name"] != f"execute_tool {name}" or span["kind"] != "SPAN_KIND_INTERNAL":
        fail(f"{span['name']} {span['kind']}: expected execute_tool {name}")
    expect(
        span,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name=name,
        gen_ai__tool__call__id=call_id,
        gen_ai__tool__type="function",
        error__type=error,
    )
    want = "STATUS_CODE_ERROR" if error else "STATUS_CODE_UNSET"
    if span["status"]["code"] != want:
        fail(f"{span['name']}: status {span['status']}")


def no_contents(spans):
    for s in spans:
        for key in CONTENT:
            if key in s["attributes"]:
                fail(f"{s['name']} carries {key} without opting in")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spans = [json.loads(line) for line in f if line.strip()]

    # A tool run: the run, two chats, two tools run in parallel between them.
    r = run(spans, "weather-desk")
    expect(
        r,
        gen_ai__usage__input_tokens=300,
        gen_ai__usage__output_tokens=38,
        gen_ai__usage__cache_read__input_tokens=100,
        pagent__run__stop_reason="no_tool_calls",
        pagent__run__turns=2,
        error__type=None,
    )
    if json.loads(r["attributes"]["gen_ai.input.messages"]) != [
        {"role": "user", "parts": [{"type": "text", "content": "Weather and time in Oslo?"}]}
    ]:
        fail(f"weather-desk input {r['attributes']['gen_ai.input.messages']}")
    kids = children_named(
        spans,
        r,
        ["chat faux-1", "execute_tool get_weather", "execute_tool get_time", "chat faux-1"],
    )
    chat(kids[0], "tool_call", 1)
    expect(kids[0], gen_ai__usage__input_tokens=120, gen_ai__usage__output_tokens=30)
    tool(kids[1], "get_weather", "call_weather")
    tool(kids[2], "get_time", "call_time")
    expect(kids[1], gen_ai__tool__call__arguments='{"city":"Oslo"}',
           gen_ai__tool__call__result="Oslo: 21 C, sunny")
    chat(kids[3], "stop", 2)
    output = json.loads(kids[3]["attributes"]["gen_ai.output.messages"])
    if output != [{"role": "assistant", "finish_reason": "stop",
                   "parts": [{"type": "text", "content": "Sunny, and it is noon."}]}]:
        fail(f"weather-desk output {output}")
    if len(json.loads(kids[3]["attributes"]["gen_ai.input.messages"])) != 4:
        fail("the second chat did not send the whole conversation")

    # A failed run: the chat fails with the provider's error, and so does the run.
    r = run(spans, "failing")
    message = "provider error: the model server is down"
    expect(r, error__type="provider", pagent__run__stop_reason="error")
    if r["status"] != {"code": "STATUS_CODE_ERROR", "message": message}:
        fail(f"failing status {r['status']}")
    kids = children_named(spans, r, ["chat faux-1"])
    chat(kids[0], "error", 1, status="STATUS_CODE_ERROR")
    expect(kids[0], error__type="provider")
    events = [e["name"] for e in kids[0]["events"]]
    if events != ["gen_ai.client.operation.exception"]:
        fail(f"failing chat events {events}")
    if kids[0]["events"][0]["attributes"].get("exception.message") != message:
        fail(f"exception {kids[0]['events'][0]}")

    # An aborted run: not an error; the tool that ran failed, the other was cancelled.
    r = run(spans, "interrupted")
    expect(r, pagent__run__stop_reason="cancelled", error__type=None)
    if r["status"]["code"] != "STATUS_CODE_UNSET":
        fail(f"interrupted status {r['status']}")
    kids = children_named(
        spans, r, ["chat faux-1", "execute_tool search", "execute_tool get_weather"]
    )
    chat(kids[0], "tool_call", 1)
    tool(kids[1], "search", "call_search", error="tool_error")
    tool(kids[2], "get_weather", "call_weather", error="cancelled")

    no_contents([s for s in spans if s["trace_id"] != run(spans, "weather-desk")["trace_id"]])
    traces = {s["trace_id"] for s in spans}
    if len(traces) != 3:
        fail(f"{len(traces)} traces, expected 3")
    print(f"otel check: {len(spans)} spans in 3 traces as expected")


if __name__ == "__main__":
    main()
