#!/usr/bin/env bash
# The Redis server of the `redis` feature's tests (tests/redis.rs).
#
#   .ci/redis.sh install       installs redis-server from the distribution's packages if missing
#   .ci/redis.sh start PORT    starts it on 127.0.0.1:PORT with a throwaway data dir, prints its URL
#   .ci/redis.sh stop PORT     stops the server started on PORT, by its own pid
#
# Idempotent: install does nothing when a redis-server of the pinned major version is
# there; start stops a server it started earlier on the same port first. The distribution's
# package is pinned by its major version (7, Debian 12): its security updates replace the
# exact version in the archive, so an exact pin would stop installing. Tests that restart
# the server start their own (tests/redis.rs), with the binary this script installed.
set -euo pipefail

MAJOR=7
STATE="$HOME/.cache/pagent-redis"

install() {
  if command -v redis-server >/dev/null \
    && redis-server --version | grep -q "v=$MAJOR\."; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  # The package starts a system service on the default port on some systems: the tests
  # never use it, and it is not ours to stop; we only make sure ours is there.
  redis-server --version | grep -q "v=$MAJOR\." || { echo "redis-server $MAJOR.x expected" >&2; exit 1; }
}

start() {
  local port="$1" dir="$STATE/$1"
  stop "$port"
  rm -rf "$dir" && mkdir -p "$dir"
  # No persistence: the shared server of the tests only needs to live for the run.
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --daemonize no --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
  echo $! >"$dir/pid"
  for _ in $(seq 1 100); do
    if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
      echo "redis://127.0.0.1:$port/"
      return
    fi
    sleep 0.1
  done
  echo "redis-server did not start on port $port:" >&2
  cat "$dir/redis.log" >&2 || true
  exit 1
}

stop() {
  local pidfile="$STATE/$1/pid"
  [ -f "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  # Only our own server: the pid must still be a redis-server.
  if [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "redis-server" ]; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  # The data dir was throwaway.
  rm -rf "${STATE:?}/$1"
}

case "${1:-}" in
  install) install ;;
  start) install; start "${2:?port}" ;;
  stop) stop "${2:?port}" ;;
  *) echo "usage: $0 install | start PORT | stop PORT" >&2; exit 2 ;;
esac
