#!/usr/bin/env bash
# The one nightly toolchain CI uses (rustdoc JSON for the public-API check, sanitizers for the
# fuzz smoke), pinned by date: a newer nightly can change the rustdoc JSON format that the
# pinned cargo-public-api reads, or break cargo-fuzz, and neither should reach CI unasked.
# Sourced: `. .ci/nightly.sh` installs it when missing and sets NIGHTLY to its name.
NIGHTLY="${PAGENT_NIGHTLY:-nightly-2026-05-20}"
rustup toolchain list | grep -q "^$NIGHTLY" || rustup toolchain install "$NIGHTLY" --profile minimal
export NIGHTLY
