#!/usr/bin/env bash
# Installs the real MCP servers that tests/mcp.rs talks to, pinned, into ~/.cache/pagent-mcp.
# Idempotent: a second run only checks the versions. Prints the directory on its last line;
# .ci/run passes it to the tests as PAGENT_MCP_DIR.
set -euo pipefail
dir="${PAGENT_MCP_CACHE:-$HOME/.cache/pagent-mcp}"
EVERYTHING=2026.8.31
FILESYSTEM=2026.8.31
PYTHON_MCP=1.30.0
mkdir -p "$dir"

have_npm() { # name version
  [ -f "$dir/node_modules/$1/package.json" ] &&
    node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
      "$dir/node_modules/$1/package.json" "$2"
}
if ! have_npm @modelcontextprotocol/server-everything "$EVERYTHING" ||
   ! have_npm @modelcontextprotocol/server-filesystem "$FILESYSTEM"; then
  [ -f "$dir/package.json" ] || echo '{"private":true}' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING" \
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM" >&2
fi

venv="$dir/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != sys.argv[1])' \
  "$PYTHON_MCP" 2>/dev/null || "$venv/bin/pip" install -q "mcp==$PYTHON_MCP" >&2
echo "$dir"
