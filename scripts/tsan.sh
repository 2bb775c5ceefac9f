#!/usr/bin/env bash
# ThreadSanitizer: builds kiln, the threads suite (tests/test_threads.c) and
# the stress suite (tests/test_stress.c) with -fsanitize=thread in
# build-tsan/ and runs those two; the first report fails them (halt_on_error). LLVM's library is not instrumented: its
# accesses are invisible to TSan, so it adds no reports, and
# scripts/tsan.supp holds no suppressions unless one is needed there.
# ASLR is switched off for the run: TSan's fixed memory layout can clash
# with the kernel's randomised mappings (vm.mmap_rnd_bits above 28).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${TSAN_BUILD:-build-tsan}"
flags="-fsanitize=thread -fno-omit-frame-pointer"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_WERROR=ON -DKILN_BUILD_EXAMPLES=OFF \
  -DKILN_BUILD_BENCH=OFF -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread > /dev/null
cmake --build "$build" -j "$(nproc)" --target test_threads test_stress
# The disk cache is on, in a directory of its own: Check forks each test,
# so later tests load what earlier ones stored.
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
export TSAN_OPTIONS="halt_on_error=1 abort_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
for suite in test_threads test_stress; do
  KILN_CACHE=1 KILN_CACHE_DIR="$cache" CK_DEFAULT_TIMEOUT=300 setarch "$(uname -m)" -R "$build/tests/$suite"
done
