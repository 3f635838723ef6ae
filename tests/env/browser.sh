#!/usr/bin/env bash
# browser.sh: makes sure a headless Chromium is here for the dashboard's browser tests (Debian's
# chromium-headless-shell, installed with apt when missing) and prints its path.
# CLUSTERNET_CHROMIUM names another browser instead.
set -euo pipefail
say() { printf '[browser] %s\n' "$*" >&2; }
find_browser() {
  if [ -n "${CLUSTERNET_CHROMIUM:-}" ]; then echo "$CLUSTERNET_CHROMIUM"; return 0; fi
  for name in chromium-headless-shell chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  done
  return 1
}
if path=$(find_browser); then echo "$path"; exit 0; fi
say "installing Debian's chromium-headless-shell (the dashboard's tests render pages in it)"
sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
    say "not root and no sudo: install chromium-headless-shell yourself, or set CLUSTERNET_CHROMIUM"; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y --no-install-recommends chromium-headless-shell fonts-dejavu-core >/dev/null \
  || { $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends chromium-headless-shell fonts-dejavu-core >/dev/null; } \
  || { say "apt-get could not install chromium-headless-shell; install it, or set CLUSTERNET_CHROMIUM"; exit 1; }
find_browser || { say "chromium-headless-shell was installed but is not on PATH"; exit 1; }
