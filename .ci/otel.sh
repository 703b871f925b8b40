#!/usr/bin/env bash
# A real OTLP/HTTP trace receiver for examples/otlp: the OpenTelemetry project's protobuf
# classes (opentelemetry-proto, pinned, in a venv cached under ~/.cache) decode what the
# official Rust exporter sends; .ci/otel/receiver.py writes each span as a JSON line.
#
#   .ci/otel.sh install          installs the receiver's venv only
#   .ci/otel.sh start PORT OUT   starts it on 127.0.0.1:PORT, appending spans to OUT
#   .ci/otel.sh stop PORT        stops the receiver started on PORT, by its own pid
#   .ci/otel.sh check OUT        checks the spans the example exported (.ci/otel/check.py)
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
# A new folder name whenever the pins change, so that a run in progress keeps its own.
VENV="$HOME/.cache/pagent-otel-venv-1"
STATE="$HOME/.cache/pagent-otel"

install() {
  if "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("opentelemetry-proto") == "1.45.2" and m.version("protobuf") == "7.36.2"' 2>/dev/null; then
    return
  fi
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q opentelemetry-proto==1.45.2 protobuf==7.36.2
}

start() {
  local port="$1" out="$2" dir="$STATE/$1"
  stop "$port"
  mkdir -p "$dir"
  : >"$out"
  "$VENV/bin/python" "$HERE/otel/receiver.py" "$port" "$out" </dev/null >"$dir/log" 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 100); do
    if grep -q listening "$dir/log" 2>/dev/null; then
      echo "http://127.0.0.1:$port"
      return
    fi
    sleep 0.1
  done
  echo "the OTLP receiver did not start on port $port:" >&2
  cat "$dir/log" >&2 || true
  exit 1
}

stop() {
  local pidfile="$STATE/$1/pid"
  [ -f "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  # Only our own receiver: the pid must still run receiver.py.
  if ps -o args= -p "$pid" 2>/dev/null | grep -q 'otel/receiver.py'; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "${STATE:?}/$1"
}

case "${1:-}" in
  start) install; start "${2:?port}" "${3:?output file}" ;;
  install) install ;;
  stop) stop "${2:?port}" ;;
  check) install; "$VENV/bin/python" "$HERE/otel/check.py" "${2:?spans file}" ;;
  *) echo "usage: $0 install | start PORT OUT | stop PORT | check OUT" >&2; exit 2 ;;
esac
