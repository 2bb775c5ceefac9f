#!/usr/bin/env bash
# gpu-check.sh: proves kiln's CUDA back end on a machine with a GPU, in one
# command run from the repository root: the versions and the device, a
# Release build with the CUDA back end, the GPU test suites with the GPU
# required (a skip fails), again under KILN_VALIDATE=1, the GPU benchmarks,
# every other suite, then one JSON file and a Markdown summary under $OUT (default
# build/gpu-check/). Exits non-zero when a step fails. Each step runs under
# `timeout`, so a hung kernel stops its step, not the check.
#
#   scripts/gpu-check.sh            on a GPU machine (about 8 minutes at most)
#   scripts/gpu-check.sh --dry-run  without a GPU (CI): the steps that need none
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: scripts/gpu-check.sh [--dry-run]" >&2; exit 2 ;;
esac

OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/*.log "$OUT"/*.xml "$OUT"/*.json "$OUT"/*.md "$OUT"/*.txt "$OUT"/steps.tsv
JOBS=$(nproc)
BUDGET=${KILN_GPU_CHECK_BUDGET:-470}   # seconds for every step together (under 8 minutes)
TEST_TIMEOUT=240                       # seconds per test suite (see tests/CMakeLists.txt)
START=$SECONDS
FAILED=0

# Each step's outcome is a line of $OUT/steps.tsv: name, status (ok,
# failed, timed out after Ns, not run: why), seconds, exit code.
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$OUT/steps.tsv"; }
not_run() { record "$1" "not run: $2" 0 ""; echo "== $1: not run: $2"; }

# The report, then the exit: non-zero when a step failed.
finish() {
  python3 scripts/gpu_report.py "$OUT" $DRY $((SECONDS - START)) $FAILED || FAILED=1
  [ $FAILED = 0 ] && echo "gpu-check: passed ($((SECONDS - START))s)" || echo "gpu-check: FAILED ($((SECONDS - START))s)"
  exit $FAILED
}

# run_step NAME CAP_SECONDS CMD...: CMD under timeout (CAP, or what is left of
# the budget), its output in $OUT/NAME.log. A failure sets FAILED and
# returns non-zero, except an exit code of $NO_GPU_RC (a dry run's "not run:
# no GPU") and the failure of an OPTIONAL=1 step (recorded as not run).
run_step() {
  local name=$1 cap=$2 left rc code t0 status
  shift 2
  left=$((BUDGET - (SECONDS - START)))
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$cap" -lt 10 ]; then
    not_run "$name" "out of time"
    FAILED=1
    return 1
  fi
  echo "== $name (at most ${cap}s): $*"
  t0=$SECONDS
  timeout --kill-after=10 "$cap" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  code=$rc
  case $rc in
    0) status=ok ;;
    "${NO_GPU_RC:-}") status="not run: no GPU"; rc=0 ;;
    124|137) status="timed out after ${cap}s" ;;
    *) status=failed; [ "${OPTIONAL:-0}" = 1 ] && status="not run: failed (optional, see $name.log)" rc=0 ;;
  esac
  [ $rc = 0 ] || FAILED=1
  record "$name" "$status" $((SECONDS - t0)) "$code"
  tail -n 15 "$OUT/$name.log"
  echo "== $name: $status ($((SECONDS - t0))s)"
  return $rc
}

# ---- 1. the device, as the driver's tool sees it (kiln's own view follows
# the build: step device) ----
if command -v nvidia-smi > /dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,memory.used --format=csv \
    > "$OUT/nvidia-smi.txt" 2>&1
  nvidia-smi | head -n 4 | tail -n 2 >> "$OUT/nvidia-smi.txt" 2>&1   # the line with "CUDA Version"
  cat "$OUT/nvidia-smi.txt"
else
  echo "nvidia-smi not found" > "$OUT/nvidia-smi.txt"
fi

# ---- 2. build ----
# The real run builds everything, Release, into its own tree. The dry run
# checks that configure line in build-gpu too, but builds only the targets
# it runs, in the tree `make test` already built when there is one with the
# CUDA back end (CI), so that CI does not pay for a second build.
# ccache's CCACHE_BASEDIR makes source paths relative before
# -fmacro-prefix-map sees them, which changes the __FILE__ that the
# fundamentals tour prints (its golden test fails): not for this build.
unset CCACHE_BASEDIR
LAUNCH=()
command -v ccache > /dev/null 2>&1 &&
  LAUNCH=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
GPU_BUILD=${KILN_GPU_BUILD:-build-gpu}
run_step configure 120 cmake -S . -B "$GPU_BUILD" -DCMAKE_BUILD_TYPE=Release -DKILN_TEST_TIMEOUT=$TEST_TIMEOUT \
  "${LAUNCH[@]}" || finish
B=$GPU_BUILD
TARGETS=()
if [ $DRY = 1 ]; then
  TARGETS=(--target kiln_bench test_cuda_runtime test_cuda_loop test_dump test_fundamentals fundamentals)
  grep -qs '^KILN_NVRTC_LIB:FILEPATH=/' build/CMakeCache.txt && B=build
fi
# CMake prints the found flag as it has it: TRUE (CUDAToolkit_FOUND) or ON.
if ! grep -Eq 'kiln: CUDA back end (ON|TRUE)$' "$OUT/configure.log"; then
  # Nothing below can run: no failure without a GPU (CI on a machine without
  # the toolkit), a failure on a GPU machine.
  not_run build "configure did not find the CUDA toolkit (see configure.log)"
  [ $DRY = 1 ] || FAILED=1
  finish
fi
run_step build 300 cmake --build "$B" -j "$JOBS" "${TARGETS[@]}" || finish
# kiln_bench exits 3 when cuda:0 cannot be used: all a dry run can expect
# (the toolkit's, NVRTC's and cuBLASLt's versions are printed even then).
BENCH_NO_GPU=$([ $DRY = 1 ] && echo 3)
NO_GPU_RC=$BENCH_NO_GPU run_step device 60 "$B/bench/kiln_bench" --device cuda:0 --info 1

# ---- 3. the GPU suites ----
# KILN_REQUIRE_GPU=1 turns each GPU test's "skipped: no CUDA device" into a
# failure (tests/util/testutil.c, tu_have_gpu); the logs are searched for the
# phrase too, for any suite that skips another way. The suites that run on
# cuda:0 (ctest label gpu) come first, then the benchmarks, and the other
# suites (the CPU back end and the CUDA emulation, as in CI) last, so that a
# slow machine loses those rather than the GPU's results.
ctest_step() {   # NAME CAP LABEL-OPTION: one ctest run, its JUnit file beside its log
  local name=$1 cap=$2 label=$3
  run_step "$name" "$cap" ctest --test-dir "$B" "$label" gpu -j "$JOBS" -V --output-junit "$OUT/$name.xml"
}
if [ $DRY = 1 ]; then
  # The GPU suites as CI sees them, then the guard itself: without a GPU,
  # the required GPU tests must fail.
  ctest_step tests-gpu 120 -L
  not_run tests-validate "no GPU"
  KILN_REQUIRE_GPU=1 CK_RUN_CASE=gpu timeout 60 "$B/tests/test_cuda_runtime" > "$OUT/require-gpu.log" 2>&1
  if [ $? = 1 ] && grep -q 'KILN_REQUIRE_GPU=1 but no CUDA device' "$OUT/require-gpu.log"; then
    record require-gpu "ok: without a GPU, KILN_REQUIRE_GPU=1 fails the GPU tests" 0 1
  else
    record require-gpu "failed: KILN_REQUIRE_GPU=1 did not fail the GPU tests without a GPU" 0 ""
    FAILED=1
  fi
else
  KILN_REQUIRE_GPU=1 ctest_step tests-gpu 150 -L
  KILN_REQUIRE_GPU=1 KILN_VALIDATE=1 ctest_step tests-validate 150 -L
fi

# ---- 4. benchmarks ----
NO_GPU_RC=$BENCH_NO_GPU run_step bench 200 "$B/bench/kiln_bench" --device cuda:0 --runs 7 \
  --json "$OUT/bench.json"
# PyTorch's memory after its first kernel on this GPU, measured as the bench
# measures kiln's (total - free), when python3 has torch with CUDA.
if [ $DRY = 1 ]; then
  not_run pytorch-memory "no GPU"
else
  OPTIONAL=1 run_step pytorch-memory 60 python3 -c '
import json, torch
torch.cuda.init()
x = torch.ones(1 << 20, device="cuda") * 3
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(json.dumps({"torch": torch.__version__, "used_after_first_kernel_mib": (total - free) / 2**20}))'
fi

# ---- the other suites, with what is left of the budget ----
if [ $DRY = 1 ]; then
  not_run tests-rest "dry run (make test runs them)"
else
  KILN_REQUIRE_GPU=1 ctest_step tests-rest 300 -LE
fi
for log in tests-gpu tests-validate tests-rest; do
  n=$(grep -cs 'skipped: no CUDA device' "$OUT/$log.log")
  [ $DRY = 1 ] || [ "${n:-0}" = 0 ] || { record "$log-skips" "failed: $n GPU test(s) skipped" 0 ""; FAILED=1; }
done

# ---- 5. the report ----
finish
