#!/usr/bin/env bash
# Installs the Debian packages kiln's build, tests and benchmarks need, when missing.
# Idempotent: a machine that has everything does nothing and needs no network.
set -euo pipefail
# python3-numpy: the NumPy interop tests (.npy, DLPack); libdlpack-dev: dlpack/dlpack.h;
# doxygen: `make docs` and the test that keeps the API reference warning-free;
# clang-19, libclang-rt-19-dev: the libFuzzer targets (scripts/fuzz.sh); debootstrap: the GPU
# bundle's proof in a minimal Debian root (scripts/gpu-bundle-check.sh)
pkgs=(build-essential cmake pkg-config llvm-19-dev check libopenblas-dev graphviz gnuplot-nox
      python3-numpy libdlpack-dev doxygen clang-19 libclang-rt-19-dev debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kiln: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
