#!/usr/bin/env bash
# image.sh [--from-source] [--binary PATH] [--tag IMAGE]: builds the clusternet image with
# `buildah bud --isolation chroot` from the Containerfile.
#
#   (default)      works offline: the runtime base is made here from Debian packages (debootstrap:
#                  glibc, libgcc, CA certificates; kept in the buildah store as
#                  localhost/clusternet-base:bookworm), clusternet is the host's release build
#                  (cargo build --release) and helm the one tests/env/k8s-bin.sh built, handed to
#                  the Containerfile's "binaries" stage with --build-context, so nothing is
#                  compiled twice and no compiler image is pulled.
#   --from-source  the Containerfile's defaults: public base images (rust, golang, distroless),
#                  both binaries compiled inside the build; needs access to those registries.
#   --binary PATH  pack this clusternet binary instead of the release build (the image test packs
#                  the binary the tests were built with).
#   --tag IMAGE    default localhost/clusternet:VERSION, the name the kustomize overlays use.
#   --print-tag    print the image name it would build and stop.
# Prints the image name on the last line of stdout. DEBIAN_MIRROR overrides the debootstrap mirror.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$(cd "$here/../.." && pwd)
say() { printf '[image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)
tag="localhost/clusternet:$version"
from_source=false
print_tag=false
binary=""
while [ $# -gt 0 ]; do
  case "$1" in
    --from-source) from_source=true ;;
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift ;;
    --binary=*) binary=${1#--binary=} ;;
    --tag) [ $# -ge 2 ] || die "--tag needs an image name"; tag=$2; shift ;;
    --tag=*) tag=${1#--tag=} ;;
    --print-tag) print_tag=true ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
if $print_tag; then echo "$tag"; exit 0; fi

# buildah and debootstrap are Debian packages: install them when missing and allowed to
need_pkgs=()
command -v buildah >/dev/null 2>&1 || need_pkgs+=(buildah)
if ! $from_source; then command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${need_pkgs[*]} (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null; } \
      || die "could not install ${need_pkgs[*]}"
  else
    die "${need_pkgs[*]} missing: install them (Debian: apt-get install ${need_pkgs[*]})"
  fi
fi

if $from_source; then
  say "building $tag from source with the public base images (this compiles clusternet and helm)"
  buildah bud --isolation chroot --layers -f "$root/Containerfile" -t "$tag" "$root" >&2
  echo "$tag"; exit 0
fi

base=localhost/clusternet-base:bookworm
if buildah inspect --type image "$base" >/dev/null 2>&1; then
  say "base $base present"
else
  mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /tmp/clusternet-rootfs-XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  say "making the base $base with debootstrap from $mirror (about a minute)"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" \
    > "$rootfs.log" 2>&1 || { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log $rootfs.log)"; }
  rm -f "$rootfs.log"
  # what a runtime base does not need: package caches, documentation, locales
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  tar -C "$rootfs" -cf - . | tar -C "$mnt" -xf -
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit -q --rm "$ctr" "$base" >/dev/null
  say "base $base made"
fi

if [ -z "$binary" ]; then
  say "release build of clusternet (cargo build --release)"
  (cd "$root" && cargo build --release --locked --bin clusternet)
  binary=$root/target/release/clusternet
fi
[ -x "$binary" ] || die "$binary is not an executable"
k8s=$(bash "$here/k8s-bin.sh" | tail -n1)
[ -x "$k8s/helm" ] || die "no helm in $k8s (tests/env/k8s-bin.sh builds it)"

# the build context holds only the Containerfile; the binaries come in as the "binaries" stage
ctx=$(mktemp -d /tmp/clusternet-image-XXXXXX)
trap 'rm -rf "$ctx" ${rootfs:+"$rootfs"}' EXIT
mkdir -p "$ctx/binaries/out"
cp "$root/Containerfile" "$ctx/Containerfile"
cp "$binary" "$ctx/binaries/out/clusternet"
cp "$k8s/helm" "$ctx/binaries/out/helm"
say "building $tag (base $base; clusternet from $binary, helm from $k8s)"
previous=$(buildah images -q --no-trunc "$tag" 2>/dev/null | head -n1 || true)
buildah bud --isolation chroot -q -f "$ctx/Containerfile" --build-context binaries="$ctx/binaries" \
  --build-arg BASE_IMAGE="$base" -t "$tag" "$ctx" >/dev/null
# the image this tag named before, now untagged (kept while a container still uses it)
now=$(buildah images -q --no-trunc "$tag" | head -n1)
if [ -n "$previous" ] && [ "$previous" != "$now" ]; then buildah rmi "$previous" >/dev/null 2>&1 || true; fi
say "built $tag ($(buildah images --format '{{.Size}}' "$tag" | head -n1))"
echo "$tag"
