#!/usr/bin/env bash
# Builds the fuzz targets' seed corpora in fuzz/corpus/<target>/ from tests/data and from the
# runs the wire tests record (nothing is kept twice). Each target reads its first byte (the
# line reader its first two) as a chunk size or a limit, so every seed gets such a prefix.
# Idempotent: seeds are named after their source; what the fuzzer added to a corpus stays.
set -euo pipefail
cd "$(dirname "$0")"
root="$(pwd)/.."
corpus="$(pwd)/corpus"
built="$(mktemp -d)"
trap 'rm -rf "$built"' EXIT

# seed TARGET NAME PREFIX FILE: PREFIX (printf escapes) then the bytes of FILE.
seed() {
    mkdir -p "$corpus/$1"
    { printf "$3"; cat "$4"; } >"$corpus/$1/seed-$2"
}

# The SSE recordings: every one for the parser, each provider's own for its decoder.
# Prefix \077: pieces (and an event limit) of 64 bytes.
for f in "$root"/tests/data/*/*.sse; do
    name="$(basename "$(dirname "$f")")-$(basename "$f" .sse)"
    seed sse "$name" '\077' "$f"
    case "$name" in
        written-anthropic*) seed anthropic_stream "$name" '' "$f" ;;
        *) seed openai_stream "$name" '' "$f" ;;
    esac
done
# The adversarial recordings that are not one provider's reach both decoders.
for f in "$root"/tests/data/written/{error_event,invalid_utf8,keepalive_crlf,truncated_mid_json,over_long_event}.sse; do
    seed anthropic_stream "written-$(basename "$f" .sse)" '' "$f"
done

# The native wire lines and session files of every recorded run (tests/wire.rs).
(cd "$root" && PAGENT_FUZZ_SEEDS="$built" cargo test -q --test wire write_fuzz_seeds -- --ignored >/dev/null)
for f in "$built"/wire/*.jsonl; do
    name="$(basename "$f" .jsonl)"
    # Prefix \377: a line limit of 16 KiB.
    seed wire_decode "$name" '\377' "$f"
    # Pieces of 7 bytes, a limit of 200 bytes; and the same lines with CRLF endings.
    seed lines "$name" '\006\307' "$f"
    sed 's/$/\r/' "$f" >"$built/crlf"
    seed lines "$name-crlf" '\006\307' "$built/crlf"
done
# pagent's own lines (v1 and v4, tests/data/pagent-wire/captures): the decoder detects them.
for f in "$root"/tests/data/pagent-wire/captures/*.jsonl; do
    seed wire_decode "pagent-$(basename "$f" .jsonl)" '\377' "$f"
done
for f in "$built"/session/*.jsonl; do
    seed session_load "$(basename "$f" .jsonl)" '\377' "$f"
done

# Request lines of the stdio server (the protocol table in src/wire/serve.rs). Prefix \377:
# tools run without approval, \376: each asks for it.
cat >"$built/requests" <<'LINES'
{"jsonrpc":"2.0","id":1,"method":"initialize"}
{"jsonrpc":"2.0","id":2,"method":"prompt","params":{"text":"Say hello."}}
{"jsonrpc":"2.0","id":3,"method":"steer","params":{"text":"Shorter."}}
{"jsonrpc":"2.0","id":4,"method":"follow_up","params":{"text":"And again."}}
{"jsonrpc":"2.0","id":5,"method":"snapshot"}
{"jsonrpc":"2.0","method":"abort"}
{"jsonrpc":"2.0","id":6,"method":"abort","params":{}}
{"jsonrpc":"2.0","id":7,"method":"clear_steering_queue"}
{"jsonrpc":"2.0","id":8,"method":"clear_follow_up_queue"}
{"jsonrpc":"2.0","id":9,"method":"clear_queues","params":{}}
{"jsonrpc":"2.0","id":10,"method":"reset"}
{"jsonrpc":"2.0","id":11,"method":"replace_messages","params":{"messages":[{"role":"user","content":"Hi."},{"role":"assistant","content":[{"type":"text","text":"Hello."}],"stop_reason":"stop"}]}}
LINES
seed serve requests '\377' "$built/requests"
cat >"$built/approvals" <<'LINES'
{"jsonrpc":"2.0","id":"a","method":"prompt","params":{"text":"Call echo."}}
{"jsonrpc":"2.0","id":1,"result":{"decision":"approve"}}
{"jsonrpc":"2.0","id":2,"result":{"decision":"reject","reason":"no"}}
{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}
{"jsonrpc":"2.0","id":"b","method":"snapshot","params":null}
LINES
seed serve approvals '\376' "$built/approvals"

for t in "$corpus"/*; do
    echo "$(basename "$t"): $(ls "$t" | wc -l) files"
done
