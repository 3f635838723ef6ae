#!/usr/bin/env bash
# quickstart.sh TASK [ARGS...]: runs `just TASK` on a fresh machine, installing the task runner
# first when it is missing (pip --user, else cargo install). README's two commands:
#   bash tests/env/quickstart.sh demo    # the main job
#   bash tests/env/quickstart.sh test    # the test suite
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
JUST_VERSION=1.59.0
export PATH="$HOME/.cargo/bin:$HOME/.local/bin:$PATH"
say() { printf '==> %s\n' "$*" >&2; }
if ! command -v just >/dev/null 2>&1; then
  say "installing the task runner just $JUST_VERSION"
  if python3 -m pip install --quiet --user "rust-just==$JUST_VERSION" 2>/dev/null \
     || python3 -m pip install --quiet "rust-just==$JUST_VERSION" 2>/dev/null; then
    PATH="$(python3 -m site --user-base 2>/dev/null)/bin:$PATH"
  fi
  hash -r
  if ! command -v just >/dev/null 2>&1; then
    say "pip could not install it; building it with cargo instead"
    cargo install --locked "just@$JUST_VERSION"
  fi
fi
for tool in openssl curl python3 go cargo; do
  command -v "$tool" >/dev/null 2>&1 || { echo "quickstart.sh: $tool is missing: install it first" >&2; exit 1; }
done
[ $# -ge 1 ] || { echo "usage: quickstart.sh TASK [ARGS...]   (tasks: just --list)" >&2; exit 2; }
cd "$here/../.."
exec just "$@"
