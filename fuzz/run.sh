#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds (default 10), one after another, on seeds built
# from tests/data and the recorded wire runs (seeds.sh). Stops at the first crash: libFuzzer
# writes the input to fuzz/artifacts/<target>/ and cargo-fuzz prints how to replay it.
#   fuzz/run.sh            # the smoke run .ci/run does
#   fuzz/run.sh 300 sse    # five minutes of one target
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-10}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(sse openai_stream anthropic_stream wire_decode lines session_load serve)

./seeds.sh >/dev/null
cargo +nightly fuzz build
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
    echo "== fuzz $t (${seconds}s)"
    # -rss_limit_mb: a target that holds more than this for one input is a bug too.
    if ! cargo +nightly fuzz run "$t" -- -max_total_time="$seconds" -rss_limit_mb=1024 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz $t failed: the input is in fuzz/artifacts/$t/"
        exit 1
    fi
    # The last status line (executions, coverage) and the totals.
    grep -E '^#[0-9]+' "$log" | tail -n 1
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log"
done
