#!/usr/bin/env bash
# The desktop example, examples/gui (package pagent-gui, egui/eframe).
#
#   .ci/gui.sh             lint, the headless UI tests (egui_kittest), the tree without an async
#                          runtime, and one run of the real window under Xvfb (what .ci/run does)
#   .ci/gui.sh install     only install Xvfb and Mesa (what .ci/run does first, in the background)
#   .ci/gui.sh shot PATH   only the window under Xvfb, saving its screenshot at PATH (the
#                          README's picture is `.ci/gui.sh shot docs/gui.png`)
#
# The package shares the workspace's target directory, so a warm run builds nothing. The X
# server and the OpenGL driver are Debian's packages, pinned by the release's versions (X.Org
# 21.1, Mesa 22.3: Debian 12): their security updates replace the exact versions in the
# archive, so an exact pin would stop installing. Mesa's software renderer draws the window;
# no GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(xvfb libgl1-mesa-dri libglx-mesa0 libegl1 libegl-mesa0 libxkbcommon-x11-0
  libxcursor1 libxrandr2 libxi6)

installed() {
  dpkg-query -W -f '${Version}\n' xvfb 2>/dev/null | grep -q '^2:21\.1\.' \
    && dpkg-query -W -f '${Version}\n' libgl1-mesa-dri 2>/dev/null | grep -q '^22\.3\.' \
    && dpkg-query -W "${PACKAGES[@]}" >/dev/null 2>&1
}

install() {
  installed && return
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  installed || { echo "Xvfb 21.1 and Mesa 22.3 (Debian 12) expected" >&2; exit 1; }
}

# The window on a virtual X display of its own (Xvfb picks a free one), the offline demo
# whatever the environment names: a question, a follow-up queued, and the screenshot taken
# 4.5 s in (the retry waited out, the tool call streamed, the tool running).
shot() {
  local out="$1" dir
  install
  cargo build -p pagent-gui --quiet
  dir="$(mktemp -d)"
  Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$dir/display" 2>"$dir/xvfb.log" &
  local xvfb=$!
  for _ in $(seq 1 100); do [ -s "$dir/display" ] && break; sleep 0.1; done
  [ -s "$dir/display" ] || { cat "$dir/xvfb.log" >&2; kill "$xvfb"; exit 1; }
  local status=0
  env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u ANTHROPIC_API_KEY -u ANTHROPIC_BASE_URL \
    DISPLAY=":$(cat "$dir/display")" LIBGL_ALWAYS_SOFTWARE=1 \
    timeout 120 target/debug/pagent-gui --prompt "What is the weather in Bergen?" \
    --follow-up "And tomorrow?" --screenshot "$out" --after 4.5 </dev/null || status=$?
  kill "$xvfb" 2>/dev/null || true
  wait "$xvfb" 2>/dev/null || true
  rm -rf "$dir"
  [ "$status" -eq 0 ] && [ -s "$out" ] || { echo "the window's smoke run failed ($status)" >&2; exit 1; }
}

all() {
  cargo clippy -p pagent-gui --all-targets -- -D warnings
  cargo test -p pagent-gui
  # No async runtime in the window's tree. (winit's `smol_str` is a string type, not smol.)
  if cargo tree -p pagent-gui -e normal --prefix none \
    | grep -E '^(tokio|async-std|smol|async-executor|async-io|futures-executor|zbus) v'; then
    echo "an async runtime in pagent-gui's tree" >&2
    exit 1
  fi
  local png
  png="$(mktemp --suffix .png)"
  shot "$png"
  echo "the window under Xvfb: $(stat -c %s "$png") bytes of screenshot"
  rm -f "$png"
}

case "${1:-all}" in
  all) all ;;
  install) install ;;
  shot) shot "${2:?usage: .ci/gui.sh shot PATH}" ;;
  *) echo "usage: .ci/gui.sh [all | install | shot PATH]" >&2; exit 2 ;;
esac
