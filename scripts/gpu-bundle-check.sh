#!/usr/bin/env bash
# gpu-bundle-check.sh: proves, without a GPU, that a bundle from
# scripts/gpu-bundle.sh needs nothing of this machine: its dry run
# (scripts/gpu-check.sh --bundle DIR --dry-run) twice, as root (CI):
#   1. in a minimal Debian root (debootstrap --variant=minbase, plus python3
#      for the report and xz; cached in build-gpu-bundle/debian-root) that
#      holds only the bundle and, bound read-only, the CUDA toolkit, which
#      the GPU machine has too: no LLVM, no Check, no OpenBLAS, no compiler;
#   2. here, with every shared library of the LLVM 19, Check and OpenBLAS
#      packages (and LLVM's z3 and ICU) hidden under an empty file (unshare -m).
# Where the root cannot be made (no debootstrap, no network) the first is
# skipped, saying so, and the second still runs. Each leaves its $OUT in
# build-gpu-bundle/proof-root/ and proof-hidden/. Exits non-zero when a dry
# run fails.
#
#   scripts/gpu-bundle-check.sh [DIR]   (default gpu-bundle/)
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=$(cd "${1:-gpu-bundle}" && pwd)
B=${KILN_BUNDLE_BUILD:-build-gpu-bundle}
mkdir -p "$B" && B=$(cd "$B" && pwd)
ROOT=$B/debian-root
FAILED=0

# ---- 1. a minimal Debian root --------------------------------------------------
# The by-hand form of the same (scripts/README.md):
#   debootstrap --variant=minbase --include=python3,xz-utils bookworm ROOT http://deb.debian.org/debian
make_root() {
  [ -f "$ROOT/.kiln-root-made" ] && return 0
  command -v debootstrap > /dev/null || { echo "debootstrap is not installed"; return 1; }
  . /etc/os-release
  [ "${ID:-}" = debian ] && [ -n "${VERSION_CODENAME:-}" ] || { echo "not a Debian machine"; return 1; }
  rm -rf "$ROOT"
  debootstrap --variant=minbase --include=python3,xz-utils "$VERSION_CODENAME" "$ROOT" \
    http://deb.debian.org/debian > "$B/debootstrap.log" 2>&1 || { tail -n 5 "$B/debootstrap.log"; return 1; }
  touch "$ROOT/.kiln-root-made"
}

# Inside new mount and PID namespaces: /dev and /proc, the toolkit where the
# build found it (read-only), the bundle copied in; then the dry run with an
# environment of nothing but PATH, HOME and OUT.
in_root() {
  local cuda
  cuda=$(readlink -f /usr/local/cuda)
  rm -rf "$ROOT/kiln"
  mkdir -p "$ROOT/kiln/out" "$ROOT$cuda"
  cp -a "$BUNDLE" "$ROOT/kiln/gpu-bundle"
  ln -sfn "$cuda" "$ROOT/usr/local/cuda"
  unshare --mount --pid --fork bash -c '
    set -e
    mount --rbind /dev "$1/dev"
    mount -t proc proc "$1/proc"
    mount --bind "$2" "$1$2" && mount -o remount,bind,ro "$1$2"
    exec chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OUT=/kiln/out \
      bash /kiln/gpu-bundle/gpu-check.sh --bundle /kiln/gpu-bundle --dry-run' _ "$ROOT" "$cuda"
}

echo "== the dry run in a minimal Debian root"
if why=$(make_root); then
  in_root || FAILED=1
  rm -rf "$B/proof-root" && cp -a "$ROOT/kiln/out" "$B/proof-root"
  rm -rf "$ROOT/kiln"
else
  echo "gpu-bundle-check: no Debian root ($why): that proof is not made; the one with hidden libraries follows"
fi

# ---- 2. here, LLVM, Check and OpenBLAS hidden ---------------------------------------
hidden_files() {   # the shared libraries those packages hold
  dpkg-query -W -f '${Package}\n' | grep -E '^(libllvm19|llvm-19|check|libsubunit|libopenblas|libz3|libicu)' |
    xargs -r dpkg -L | grep -E '\.so(\.[0-9.]+)?$' | while read -r f; do
      if [ -f "$f" ] && [ ! -L "$f" ]; then echo "$f"; fi
    done
}
echo "== the dry run here, with the $(hidden_files | wc -l) shared libraries of LLVM 19, Check and OpenBLAS hidden"
EMPTY=$(mktemp)
rm -rf "$B/proof-hidden" && mkdir -p "$B/proof-hidden"
hidden_files > "$B/proof-hidden.files"
unshare --mount bash -c '
  set -e
  while read -r f; do mount --bind "$1" "$f"; done < "$2"
  exec env -u LD_LIBRARY_PATH -u LD_PRELOAD OUT="$3" bash "$4/gpu-check.sh" --bundle "$4" --dry-run' \
  _ "$EMPTY" "$B/proof-hidden.files" "$B/proof-hidden" "$BUNDLE" || FAILED=1
rm -f "$EMPTY" "$B/proof-hidden.files"
[ $FAILED = 0 ] && echo "gpu-bundle-check: passed" || echo "gpu-bundle-check: FAILED"
exit $FAILED
