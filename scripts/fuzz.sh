#!/usr/bin/env bash
# Builds every tests/fuzz/fuzz_*.c with clang-19 and libFuzzer (ASan+UBSan) in
# build-fuzz/ and runs each for FUZZ_SECONDS (default 60) against its checked-in
# corpus tests/fuzz/corpus/<target>/ (new inputs go to a scratch directory, so
# the corpus only changes by hand). Stops with a non-zero status at the first
# sanitizer error or oracle failure; the input that caused it is left in
# build-fuzz/artifacts/, its log in build-fuzz/<target>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
build="${FUZZ_BUILD:-build-fuzz}"
cc="${FUZZ_CC:-clang-19}"
cmake -S . -B "$build" -DKILN_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="${cc/clang/clang++}" > /dev/null
cmake --build "$build" -j "$(nproc)"
mkdir -p "$build/artifacts"
for src in tests/fuzz/fuzz_*.c; do
  name="$(basename "$src" .c)"
  corpus="tests/fuzz/corpus/$name"
  scratch="$(mktemp -d)"
  mkdir -p "$corpus"
  echo "fuzz: $name for ${seconds}s"
  # detect_leaks stays on: each input must release what it made. ASan's own
  # quarantine catches a use after free; kiln's would only hold freed nodes
  # and make libFuzzer scan for leaks after every input.
  set +e
  KILN_CHECK_HANDLES=0 ASAN_OPTIONS="abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1" \
    "./$build/tests/fuzz/$name" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" "$scratch" "$corpus" > "$build/$name.log" 2>&1
  status=$?
  set -e
  tail -n 40 "$build/$name.log"
  rm -rf "$scratch"
  [ "$status" -eq 0 ] || { echo "fuzz: $name failed (status $status)"; exit 1; }
done
