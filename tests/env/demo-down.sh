#!/usr/bin/env bash
# demo-down.sh DIR: stops the demo's clusternet processes and its control planes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/env-down.sh" "${1:-/tmp/clusternet-demo}"
