#!/usr/bin/env bash
# Installs the ACP test client's dependencies, the official TypeScript SDK
# (@agentclientprotocol/sdk 2.4.0), ajv 8.17.1 (which checks every line the agent writes
# against the SDK's JSON schema) and what they need, exactly as tests/acp/package-lock.json
# pins them, into ~/.cache/pagent-acp-2. Idempotent: nothing is fetched when that lock file is
# already installed there. Prints the node_modules directory; tests/acp.rs reads it from
# PAGENT_ACP_NODE_PATH (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$HOME/.cache/pagent-acp-2"
mkdir -p "$dir"
if ! cmp -s tests/acp/package-lock.json "$dir/installed-lock.json" \
  || [ ! -f "$dir/node_modules/@agentclientprotocol/sdk/package.json" ]; then
  cp tests/acp/package.json tests/acp/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --silent >&2)
  cp tests/acp/package-lock.json "$dir/installed-lock.json"
fi
echo "$dir/node_modules"
