#!/usr/bin/env bash
# The release archive the krew manifest points at: the binary under the name krew runs
# (kubectl-clusternet), LICENSE, and the manifest with the archive's sha256.
#   dist.sh BINARY OUTDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: dist.sh BINARY OUTDIR" >&2; exit 2; }
bin=$1; out=$2
[ -x "$bin" ] || { echo "dist.sh: $bin is not an executable (just build first)" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"
cp "$bin" "$stage/kubectl-clusternet"; cp "$root/LICENSE" "$stage/LICENSE"
archive="$out/kubectl-clusternet_linux_amd64.tar.gz"
tar -C "$stage" -czf "$archive" kubectl-clusternet LICENSE
sha=$(sha256sum "$archive" | cut -d' ' -f1)
sed -e "s/@VERSION@/$version/g" -e "s/@SHA256@/$sha/" "$root/deploy/krew/clusternet.yaml" > "$out/clusternet.yaml"
echo "$sha  $(basename "$archive")" > "$archive.sha256"
echo "$archive (sha256 $sha)"
echo "$out/clusternet.yaml"
