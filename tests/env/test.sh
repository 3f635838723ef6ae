#!/usr/bin/env bash
# test.sh [cargo test args...] | test.sh --only [cargo test args...]: the whole test suite (or
# one part of it) against real control planes.
# Builds or reuses the Kubernetes binaries, starts one parent and CHILDREN children that every
# integration-test binary shares (CLUSTERNET_TEST_ENV), runs `cargo test`, and always tears the
# environment down again. Set CLUSTERNET_TEST_ENV yourself to reuse an environment you started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CHILDREN=${CLUSTERNET_TEST_CHILDREN:-3}
bash "$here/k8s-bin.sh" >/dev/null
# the dashboard's tests render its pages in a real headless Chromium
CLUSTERNET_CHROMIUM=$(bash "$here/browser.sh")
export CLUSTERNET_CHROMIUM
if [ -z "${CLUSTERNET_TEST_ENV:-}" ]; then
  dir=$(mktemp -d /tmp/clusternet-test-XXXXXX)
  trap 'bash "$here/env-down.sh" "$dir" >/dev/null 2>&1 || true' EXIT
  bash "$here/env-up.sh" "$dir" "$CHILDREN" --owner-pid $$
  export CLUSTERNET_TEST_ENV=$dir
fi
# benches are not tests: `just bench` runs them (they still compile under `just lint`);
# `test.sh --only ARGS` runs `cargo test ARGS` alone (`just chaos` runs one test binary so)
if [ "${1:-}" = "--only" ]; then
  shift
  cargo test "$@"
else
  cargo test --lib --bins --tests --no-fail-fast "$@"
fi
