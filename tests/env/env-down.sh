#!/usr/bin/env bash
# env-down.sh DIR: stops every process env-up.sh started for DIR, also when pid files are stale or
# missing (every such process names a file under DIR on its command line), then removes its state.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: env-down.sh DIR" >&2; exit 2; }
[ -d "$1" ] || { echo "env-down.sh: $1: no such environment" >&2; exit 0; }
DIR=$(cd "$1" && pwd)
self=$$
pids_of_env() { # every process whose command line names DIR, except ourselves and our parents
  pgrep -f -- "$DIR/" | grep -vx "$self" | while read -r p; do
    [ "$p" = "$PPID" ] && continue
    # never kill the watchdog that runs us
    grep -qa env-down.sh "/proc/$p/cmdline" 2>/dev/null && continue
    echo "$p"; done; }
# children first (kwok, scheduler, kcm), then apiservers, then etcd
for pat in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  for f in "$DIR"/pids/*"$pat".pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
done
for _ in $(seq 1 50); do [ -z "$(pids_of_env)" ] && break; sleep 0.2; done
left=$(pids_of_env)
[ -n "$left" ] && kill -9 $left 2>/dev/null
for f in "$DIR"/pids/watchdog.pid; do [ -f "$f" ] && [ "$(cat "$f")" != "$PPID" ] && kill "$(cat "$f")" 2>/dev/null; done
rm -rf "$DIR/etcd-data" "$DIR/pids" "$DIR/ready"
echo "environment $DIR stopped (logs kept in $DIR/logs)"
