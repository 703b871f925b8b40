#!/usr/bin/env bash
# The official Python SDKs, pinned, in a venv of their own: the request types and stream event
# models that tests/sdk/validate.py checks pagent's requests and the replayed streams against.
# Prints the venv's python as its last line. Cached in ~/.cache/pagent-sdk-venv-1 (a new
# version of a pin gets a new folder name, so that a run in progress elsewhere keeps its own).
set -euo pipefail
OPENAI_VERSION=3.51.0
ANTHROPIC_VERSION=2.10.0
venv="$HOME/.cache/pagent-sdk-venv-1"
if ! "$venv/bin/python" - <<PY 2>/dev/null; then
import importlib.metadata as m
assert m.version("openai") == "$OPENAI_VERSION" and m.version("anthropic") == "$ANTHROPIC_VERSION"
PY
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "openai==$OPENAI_VERSION" "anthropic==$ANTHROPIC_VERSION" >&2
fi
echo "$venv/bin/python"
