#!/usr/bin/env python3
"""A pagent wire client in Python's standard library: drives the stdio agent server
through a prompt that calls a tool, approving (or rejecting) the call when asked.

usage:
  cargo build --example wire_server
  python3 examples/wire_client.py target/debug/examples/wire_server --ask
  python3 examples/wire_client.py --reject "not today" target/debug/examples/wire_server --ask

Prints the streamed reply and what happened, and exits 0 when the run ended with a final
answer after the server asked for approval and the tool ran (or was rejected, with
--reject). The protocol is documented in `pagent::wire::serve`.
"""
import json
import queue
import subprocess
import sys
import threading
import time

TIMEOUT = 30.0  # seconds for the whole conversation


def main(argv):
    reject = None
    if len(argv) >= 2 and argv[0] == "--reject":
        reject, argv = argv[1], argv[2:]
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              encoding="utf-8", bufsize=1)
    lines = queue.Queue()

    def read():
        for line in server.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + TIMEOUT

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def receive():
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(left, 0.01))
        except queue.Empty:
            raise SystemExit("wire_client: no answer in time")
        if line is None:
            raise SystemExit("wire_client: the server closed its output")
        return json.loads(line)

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize"})
    init = receive()
    print(f"server: {init['result']['server']['name']} {init['result']['server']['version']}, "
          f"protocol {init['result']['protocol_version']}, "
          f"tool approval: {init['result']['capabilities']['tool_approval']}")

    send({"jsonrpc": "2.0", "id": 2, "method": "prompt", "params": {"text": "What is 2 + 3?"}})
    asked = 0
    tool_results = []
    while True:
        msg = receive()
        method = msg.get("method")
        if method == "approve_tool_call":
            # A request from the server: answer it with the same id.
            call = msg["params"]["call"]
            asked += 1
            print(f"\n[approve? {call['name']}({call['arguments']})] -> "
                  f"{'reject: ' + reject if reject else 'approve'}")
            decision = {"decision": "reject", "reason": reject} if reject else {"decision": "approve"}
            send({"jsonrpc": "2.0", "id": msg["id"], "result": decision})
        elif method == "MessageUpdate":
            delta = msg["params"]["delta"]
            if delta["type"] == "text_delta":
                print(delta["text"], end="", flush=True)
        elif method == "ToolEnd":
            result = msg["params"]["result"]
            tool_results.append(result)
            print(f"\n[tool {result['tool_name']} -> {result['content']!r}"
                  f"{' (error)' if result['is_error'] else ''}]")
        elif method is None and msg.get("id") == 2:
            if "error" in msg:
                raise SystemExit(f"wire_client: prompt failed: {msg['error']}")
            result = msg["result"]
            print(f"\nstop reason: {result['stop_reason']}; final text: {result['text']!r}")
            break

    server.stdin.close()  # the server returns when its input ends
    server.wait(timeout=max(deadline - time.monotonic(), 1.0))
    ok = (result["stop_reason"] == "no_tool_calls" and asked == 1 and len(tool_results) == 1
          and tool_results[0]["is_error"] == bool(reject) and server.returncode == 0)
    print("ok" if ok else "unexpected conversation")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
