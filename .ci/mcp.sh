#!/usr/bin/env bash
# Installs the real MCP servers that tests/mcp.rs talks to into ~/.cache/pagent-mcp, every
# package pinned: the npm servers (@modelcontextprotocol/server-everything and
# server-filesystem 2026.8.31) and their dependencies exactly as tests/mcp/package-lock.json
# holds them (among them @modelcontextprotocol/sdk 1.32.2, whose example server with OAuth
# tests/mcp/oauth.rs runs), and the official Python SDK (mcp 1.30.0, for tests/mcp/http_server.py) with its
# dependencies as tests/mcp/requirements.txt holds them, in a virtualenv; the SDK's current
# major version (mcp 2.3.0, dual-era, for tests/mcp/sdk2_server.py) as
# tests/mcp/requirements-2.txt holds it, in a virtualenv of its own (venv-2: a new major
# version gets a new folder, so that a run using the old one is never broken midway); and
# strace.
# Idempotent: nothing is fetched when those files are already installed there. Prints the
# directory on its last line; .ci/run passes it to the tests as PAGENT_MCP_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${PAGENT_MCP_CACHE:-$HOME/.cache/pagent-mcp}"
mkdir -p "$dir"

if ! cmp -s tests/mcp/package-lock.json "$dir/installed-lock.json" \
  || [ ! -f "$dir/node_modules/@modelcontextprotocol/server-everything/package.json" ]; then
  cp tests/mcp/package.json tests/mcp/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  cp tests/mcp/package-lock.json "$dir/installed-lock.json"
fi

# strace counts the signals the process-group tests send (tests/mcp/process.rs); Debian's.
if ! command -v strace >/dev/null; then
  { apt-get update -qq && apt-get install -y -qq strace=6.1-0.1; } >&2
fi

venv="$dir/venv"
if ! cmp -s tests/mcp/requirements.txt "$dir/installed-requirements.txt"; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r tests/mcp/requirements.txt >&2
  cp tests/mcp/requirements.txt "$dir/installed-requirements.txt"
fi
venv2="$dir/venv-2"
if ! cmp -s tests/mcp/requirements-2.txt "$dir/installed-requirements-2.txt"; then
  [ -x "$venv2/bin/python" ] || python3 -m venv "$venv2"
  "$venv2/bin/pip" install -q -r tests/mcp/requirements-2.txt >&2
  cp tests/mcp/requirements-2.txt "$dir/installed-requirements-2.txt"
fi
echo "$dir"
