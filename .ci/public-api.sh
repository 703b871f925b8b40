#!/usr/bin/env bash
# The public API of pagent, one item a line, against the committed snapshot tests/public-api.txt.
# Listed with every feature on (`pagent::mcp`, `pagent::acp`, `pagent::redis`...), so that a
# change to a feature's API shows in the diff like one to the core's.
#
#   .ci/public-api.sh check    fail (with the diff) when the API differs from the snapshot
#   .ci/public-api.sh update   rewrite the snapshot; commit it together with the API change
#   .ci/public-api.sh install  only install the pinned nightly and cargo-public-api
#
# The listing comes from cargo-public-api, which reads rustdoc's JSON output and so needs a
# nightly toolchain (only to document, the crate itself builds on stable). The tool version is
# pinned: a rustdoc JSON format it does not know makes it fail, so a newer nightly may need a
# newer pin (see https://github.com/cargo-public-api/cargo-public-api#compatibility-matrix).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.52.0
SNAPSHOT=tests/public-api.txt

. .ci/nightly.sh
# Niced: .ci/run installs it in the background while it builds.
cargo public-api --version 2>/dev/null | grep -qx "cargo-public-api $VERSION" \
  || nice -n 10 cargo install cargo-public-api --version "$VERSION" --locked

# Its own target dir, so the nightly build never invalidates the stable one.
# `--all-features`: one snapshot for the core and every feature (a feature only adds items,
# so the core's API is the part of the list that carries no feature's module path).
# `-ss`: leave out blanket and auto-trait impls (From<T> for T, Borrow, Send, Sync, Unpin,
# ...), which follow from the items listed and only make the list noisy; derived impls
# (Clone, Debug, PartialEq...) stay: removing one breaks users.
list() {
  CARGO_TARGET_DIR=target/public-api cargo "+$NIGHTLY" public-api --all-features -ss --color never
}

case "${1:-}" in
  install) ;;
  update)
    list >"$SNAPSHOT"
    echo "wrote $SNAPSHOT ($(wc -l <"$SNAPSHOT") items)"
    ;;
  check)
    current=$(mktemp)
    trap 'rm -f "$current"' EXIT
    list >"$current"
    if ! diff -u "$SNAPSHOT" "$current"; then
      echo
      echo "The public API differs from $SNAPSHOT (- snapshot, + this tree)."
      echo "If the change is intended, run .ci/public-api.sh update, note it in CHANGELOG.md"
      echo "(with how to migrate, when it breaks users) and commit the snapshot with it."
      exit 1
    fi
    echo "public API unchanged ($(wc -l <"$SNAPSHOT") items)"
    ;;
  *)
    echo "usage: $0 check|update|install" >&2
    exit 2
    ;;
esac
