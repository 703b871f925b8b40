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

. ../.ci/nightly.sh
./seeds.sh >/dev/null
# Built outside the checkout, so that the dependencies (a sanitizer build of each) are
# compiled once per machine rather than once per clone.
target_dir="${PAGENT_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pagent-fuzz-target}"
# Cargo never prunes it: past 4 GB (the builds of older locks), it starts over.
if [ -d "$target_dir" ] && [ "$(du -sm "$target_dir" | cut -f1)" -gt 4096 ]; then rm -rf "$target_dir"; fi
cargo "+$NIGHTLY" fuzz build --target-dir "$target_dir"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
for t in "${targets[@]}"; do
    echo "== fuzz $t (${seconds}s)"
    # These targets start threads (a provider's request thread, the loopback server's, the
    # server's run thread) that may outlive one input; LeakSanitizer then reports the
    # thread-local bookkeeping of a live thread (32 bytes from __cxa_thread_atexit_impl) as
    # a leak, after an input and again when the process exits. Their thread count stays
    # flat over a run, so leaks are checked only where every input runs on one thread.
    leaks=1
    case "$t" in openai_stream | anthropic_stream | serve) leaks=0 ;; esac
    # -rss_limit_mb: a target that holds more than this for one input is a bug too.
    if ! ASAN_OPTIONS="detect_leaks=$leaks" cargo "+$NIGHTLY" fuzz run --target-dir "$target_dir" "$t" -- -max_total_time="$seconds" -rss_limit_mb=1024 -detect_leaks="$leaks" \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz $t failed: the input is in fuzz/artifacts/$t/"
        exit 1
    fi
    # The last status line (executions, coverage) and the totals.
    grep -E '^#[0-9]+' "$log" | tail -n 1
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log"
done
