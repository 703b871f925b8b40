#!/usr/bin/env bash
# Installs the ACP test client's one dependency, the official TypeScript SDK, pinned, into
# ~/.cache/pagent-acp (idempotent: nothing is fetched when that version is already there).
# Prints the directory whose node_modules holds it; tests/acp.rs reads it from
# PAGENT_ACP_NODE_PATH (.ci/run sets it).
set -euo pipefail
SDK_VERSION=2.4.0
dir="$HOME/.cache/pagent-acp"
mkdir -p "$dir"
have="$(node -p "require('$dir/node_modules/@agentclientprotocol/sdk/package.json').version" 2>/dev/null || true)"
if [ "$have" != "$SDK_VERSION" ]; then
  [ -f "$dir/package.json" ] || echo '{"name":"pagent-acp-client","private":true}' > "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --silent --save-exact \
    "@agentclientprotocol/sdk@$SDK_VERSION" >&2
fi
echo "$dir/node_modules"
