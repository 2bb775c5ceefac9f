#!/usr/bin/env bash
# gpu-bundle.sh: builds here everything the GPU check runs and packs it into
# one folder that needs none of this machine's packages, for a GPU machine
# that has no LLVM 19, no Check, no OpenBLAS and no way to fetch them
# (README: Checking on a GPU). A Release build with the CUDA back end in
# build-gpu-bundle/, every program linked with libkiln.so (one copy of kiln
# for all of them) and finding its libraries through the run path
# $ORIGIN/../lib; then scripts/gpu_bundle.py packs the suites, kiln_bench,
# the examples the check runs, libkiln.so and every library ldd says they load
# that glibc does not provide (xz), and the scripts and data the steps read.
#
#   scripts/gpu-bundle.sh [DIR]                 into DIR (default gpu-bundle/), at most 56 MiB
#   scripts/gpu-bundle.sh --uncompressed DIR    folders instead of archives, no limit (what a
#                                               plain scripts/gpu-check.sh runs on its machine)
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=56   # the working tree travels with it: both under 64 MiB

UNCOMPRESSED=()
[ "${1:-}" = --uncompressed ] && UNCOMPRESSED=(--uncompressed) && shift
OUTDIR=${1:-gpu-bundle}
B=${KILN_BUNDLE_BUILD:-build-gpu-bundle}
mkdir -p "$B" && B=$(cd "$B" && pwd)

# ccache's CCACHE_BASEDIR makes source paths relative before
# -fmacro-prefix-map sees them, which changes the __FILE__ that the
# fundamentals tour prints (its golden test fails): not for this build.
unset CCACHE_BASEDIR
LAUNCH=()
command -v ccache > /dev/null 2>&1 &&
  LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# OpenBLAS stays out (W4 and W7 then take their reference from hand_linear);
# the hand-written loops target x86-64-v3 (AVX2, FMA: every x86-64 server of
# the last ten years), not this CPU; the suites' timeout is gpu-check's.
# The run path is a DT_RPATH (--disable-new-dtags): the loader searches it for
# the libraries of libraries too (libxml2's libicuuc), a RUNPATH only for the
# object's own.
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKILN_LINK_SHARED=ON -DKILN_BENCH_OPENBLAS=OFF \
  -DKILN_BENCH_ARCH=x86-64-v3 -DKILN_TEST_TIMEOUT=240 \
  -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$B/bin" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$B/lib" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags \
  "${LAUNCH[@]}" > "$B/configure.log"
grep -Eq 'kiln: CUDA back end (ON|TRUE)$' "$B/configure.log" ||
  { echo "gpu-bundle: the CUDA toolkit was not found (see $B/configure.log)" >&2; exit 1; }
cmake --build "$B" -j "$(nproc)" > "$B/build.log" || { tail -n 30 "$B/build.log"; exit 1; }
python3 scripts/gpu_bundle.py . "$B" "$OUTDIR" $LIMIT_MIB "${UNCOMPRESSED[@]}"
