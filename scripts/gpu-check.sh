#!/usr/bin/env bash
# gpu-check.sh: proves kiln's CUDA back end on a machine with an NVIDIA GPU in
# one command of at most 6 minutes, its steps ordered so that a run cut off
# anywhere has proved the most it could by then:
#   0. the bundle: this glibc is at least the build machine's, the archives
#      are intact, and every program's libraries resolve inside the bundle
#      (ldd -r), glibc's own excepted
#   1. the device: nvidia-smi, kiln_cuda_is_available (the demo), the
#      versions of the toolkit, NVRTC, cuBLASLt and the driver (kiln_bench)
#   2. the first kernel and the transfer round trip (kiln_bench --info 2:
#      device memory after kiln's first kernel, kiln_rand on both devices)
#   3. the GPU suites (ctest label gpu) with KILN_REQUIRE_GPU=1: a skip fails
#   4. the same under KILN_VALIDATE=1
#   5. the GPU benchmarks: kiln_bench on W1-W7, then PyTorch on the same
#      (gpu_peers.py, with the python3 that is there)
#   6. everything else: the other suites, kiln_bench's other GPU rows
# Each step appends to $OUT/steps.tsv (and what its logs say of failures to
# $OUT/log.txt), and the report (gpu_report.py: $OUT/gpu-check.json and
# $OUT/summary.md) is rewritten after each, so a run stopped at its limit
# still returns what it did. $OUT holds 8 files at most. Exits non-zero when
# a step failed.
#
#   scripts/gpu-check.sh --bundle DIR   DIR made here by scripts/gpu-bundle.sh: nothing is
#                                       built or installed on the GPU machine
#   scripts/gpu-check.sh                builds the same programs on this machine first
#                                       (it needs kiln's packages), then the same steps
#   add --dry-run                       without a GPU (CI): every step that needs none
#                                       runs for real
#
# Programs built against one glibc run on any newer one (glibc keeps every
# old symbol version, never the reverse), so step 0 refuses a machine whose
# glibc is older than the one the bundle was built against.
set -uo pipefail

DRY=0 BUNDLE=""
usage() { echo "usage: scripts/gpu-check.sh [--bundle DIR] [--dry-run]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --bundle) [ $# -ge 2 ] || usage; BUNDLE=$2; shift ;;
    *) usage ;;
  esac
  shift
done
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-build/gpu-check}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
OUT_FILES=(steps.tsv log.txt prologue.json bench.json peers.jsonl bench-rest.json gpu-check.json summary.md)
for f in "${OUT_FILES[@]}"; do rm -f "$OUT/$f"; done
BUDGET=${KILN_GPU_CHECK_BUDGET:-360}   # seconds for every step together
LOG_CAP=$((8 << 20))                   # bytes of $OUT/log.txt
JOBS=$(nproc)
FAILED=0 INCOMPLETE=0
START=$SECONDS
NO_GPU_RC=""                           # an exit code that means "no GPU" (the dry run's kiln_bench: 3)
[ $DRY = 1 ] && NO_GPU_RC=3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu-check.XXXXXX")   # unpacked bundle, logs, the suites' folders
trap 'rm -rf "$WORK"' EXIT
LOGS=$WORK/logs
mkdir -p "$LOGS"

# ---- what the steps leave in $OUT ------------------------------------------
# steps.tsv: step, item ("-" for the step itself), status (ok, failed, timed
# out after Ns, skipped, not run: why), seconds, exit code, detail.
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-}" >> "$OUT/steps.tsv"; }
fact() { record facts "$1" ok 0 "" "$2"; }
not_run() { record "$1" - "not run: $2" 0 ""; echo "== $1: not run: $2"; }

# Appends a log, or its head and tail when long, to log.txt while it has room.
log_append() {
  local title=$1 file=$2
  [ -f "$file" ] || return 0
  [ "$(stat -c %s "$OUT/log.txt" 2>/dev/null || echo 0)" -lt $LOG_CAP ] || return 0
  { echo "==== $title"
    if [ "$(wc -l < "$file")" -le 400 ]; then cat "$file"
    else head -n 100 "$file"; echo "[... $(wc -l < "$file") lines, the last 300:]"; tail -n 300 "$file"; fi
  } >> "$OUT/log.txt"
}

REPORT=""
report() {   # gpu_report.py after every step; with --final it also prints the summary
  [ -n "$REPORT" ] && python3 "$REPORT" "$OUT" "$BUNDLE" $DRY $((SECONDS - START)) $FAILED "$@"
}
finish() {
  report --final || FAILED=1
  local verdict=passed
  [ $INCOMPLETE = 0 ] || verdict="passed what ran; $INCOMPLETE item(s) cut off or not run for want of time"
  [ $FAILED = 0 ] || verdict=FAILED
  echo "gpu-check: $verdict ($((SECONDS - START))s)"
  exit $FAILED
}

left() { echo $((BUDGET - (SECONDS - START))); }

# A status that does not fail the check: passed, skipped on purpose, not run
# for a stated reason, or cut off because the budget ran out (the check is
# then incomplete, not failed: what ran still counts).
passed() { case $1 in ok*|skipped*|not\ run*|cut\ off*) return 0 ;; *) return 1 ;; esac; }
tally() {
  passed "$1" || FAILED=1
  case $1 in cut\ off*|not\ run:\ out\ of\ time*) INCOMPLETE=$((INCOMPLETE + 1)) ;; esac
}

# run_step NAME CAP CMD...: CMD under timeout (CAP, or what is left of the
# budget), its output in $LOGS/NAME.log and log.txt. A failure sets FAILED
# and returns non-zero, except $NO_GPU_RC (a dry run's "not run: no GPU")
# and an OPTIONAL=1 step's failure or timeout (recorded as not run).
run_step() {
  local name=$1 cap=$2 rc t0 status by_budget=0
  shift 2
  [ "$cap" -gt "$(left)" ] && cap=$(left) by_budget=1
  if [ "$cap" -lt 5 ]; then
    not_run "$name" "out of time"
    INCOMPLETE=$((INCOMPLETE + 1))
    return 0
  fi
  echo "== $name (at most ${cap}s, $(left)s of the budget left): $*"
  t0=$SECONDS
  timeout --kill-after=10 "$cap" bash -c '"$@"' "$name" "$@" > "$LOGS/$name.log" 2>&1   # a program or an exported function
  rc=$?
  case $rc in
    0) status=ok ;;
    "$NO_GPU_RC") status="not run: no GPU" ;;
    124|137) status="timed out after ${cap}s"; [ $by_budget = 1 ] && status="cut off after ${cap}s (the budget)" ;;
    *) status=failed ;;
  esac
  [ "${OPTIONAL:-0}" = 1 ] && ! passed "$status" && status="not run: $status (optional, see log.txt)"
  tally "$status"
  record "$name" - "$status" $((SECONDS - t0)) $rc "$(grep -m1 -E 'ERROR|MISMATCH|FAILED|error:|not run:' "$LOGS/$name.log" | cut -c1-300)"
  log_append "$name: $status ($((SECONDS - t0))s)" "$LOGS/$name.log"
  tail -n 12 "$LOGS/$name.log"
  echo "== $name: $status ($((SECONDS - t0))s; $(left)s of the budget left)"
  report > /dev/null
  passed "$status"
}

# ---- the suites ---------------------------------------------------------------
# One suite of tests.tsv: its command and environment with the bundle's
# places filled in, under timeout (its own, or what is left of the step),
# in a folder of its own; one line of steps.tsv, and its log in log.txt when
# it did not pass. SUITE_ENV: the step's variables, after the suite's own.
run_suite() {
  local step=$1 name=$2 timeout=$3 skip_rc=$4 cwd=$5 env=$6 cmd=$7 deadline=$8 t0=$SECONDS rc status detail cap
  cap=$((deadline - SECONDS))
  [ "$timeout" -lt "$cap" ] && cap=$timeout
  if [ "$cap" -lt 5 ]; then
    record "$step" "$name" "not run: out of time" 0 ""
    return
  fi
  local log=$LOGS/$step/$name.log
  cwd=${cwd//@W@/$WORK/$step}
  mkdir -p "$cwd"
  env=${env//@B@/$R} cmd=${cmd//@B@/$R}
  cmd=${cmd//@PYTHON@/$PYTHON}
  [ "$env" = - ] && env=""
  set -f   # the words are paths and KEY=value pairs, never patterns
  (cd "$cwd" && exec timeout --kill-after=5 "$cap" env $env "${SUITE_ENV[@]}" $cmd) > "$log" 2>&1
  rc=$?
  set +f
  case $rc in
    0) status=ok ;;
    "$skip_rc") status="skipped (exit $rc)" ;;
    124|137) status="timed out after ${cap}s"
             [ "$cap" -lt "$timeout" ] && status="cut off after ${cap}s (the budget)" ;;
    *) status=failed ;;
  esac
  if [ $DRY = 0 ] && [ "$status" = ok ] && grep -q 'skipped: no CUDA device' "$log"; then
    status="failed: a GPU test skipped"
  fi
  detail=$(grep -Eo '[0-9]+%: Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$log" | tail -n 1)
  if ! passed "$status"; then
    detail="$detail $(grep -m1 -E ':[FE]:|rror|FAIL' "$log" | cut -c1-300)"
    log_append "$step/$name: $status" "$log"
  fi
  record "$step" "$name" "$status" $((SECONDS - t0)) $rc "$detail"
}

# run_suites STEP CAP WHICH [VAR=value...]: the suites of tests.tsv that WHICH
# picks (gpu: ctest label gpu; rest: the others), JOBS at a time, under one
# deadline; then the step's own line, from its suites' lines. In a dry run
# the other Check suites (label check) are only started: a case name that
# matches none, so each program loads, builds its suite and exits (make test
# runs them); the Python ones take seconds and run; any other is not run.
run_suites() {
  local step=$1 cap=$2 which=$3 name labels timeout skip_rc cwd env cmd n=0 t0=$SECONDS line
  shift 3
  [ "$cap" -gt "$(left)" ] && cap=$(left)
  local deadline=$((SECONDS + cap))
  mkdir -p "$LOGS/$step"
  echo "== $step (at most ${cap}s, $(left)s of the budget left): the $which suites, $JOBS at a time $*"
  while IFS=$'\t' read -r name labels timeout skip_rc cwd env cmd; do
    case ",$labels," in *,gpu,*) [ "$which" = gpu ] || continue ;; *) [ "$which" = rest ] || continue ;; esac
    SUITE_ENV=("$@")
    if [ $DRY = 1 ] && [ "$which" = rest ]; then
      case ",$labels,:$cmd" in
        *,check,*) SUITE_ENV+=(CK_RUN_CASE=gpu-check-dry-run-starts-only) ;;
        *:@PYTHON@*) ;;
        *) record "$step" "$name" "not run: dry run (make test runs it)" 0 ""; continue ;;
      esac
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    run_suite "$step" "$name" "$timeout" "$skip_rc" "$cwd" "$env" "$cmd" "$deadline" &
    n=$((n + 1))
  done < "$B/tests.tsv"
  wait
  local bad=0 cut=0 status
  while IFS=$'\t' read -r line; do
    status=$(cut -f3 <<< "$line")
    passed "$status" || bad=$((bad + 1))
    case $status in cut\ off*|not\ run:\ out\ of\ time*) cut=$((cut + 1)) ;; esac
  done < <(awk -F'\t' -v s="$step" '$1 == s && $2 != "-"' "$OUT/steps.tsv")
  status=ok
  [ $cut = 0 ] || { status="cut off: $cut of $n suites (the budget)"; INCOMPLETE=$((INCOMPLETE + cut)); }
  [ $bad = 0 ] || { status="failed: $bad of $n suites"; FAILED=1; }
  record "$step" - "$status" $((SECONDS - t0)) "" "$n suites"
  echo "== $step: $status ($((SECONDS - t0))s; $(left)s of the budget left)"
  awk -F'\t' -v s="$step" '$1 == s && $2 != "-" {printf "   %-24s %-32s %4ss  %s\n", $2, $3, $4, $6}' "$OUT/steps.tsv"
  report > /dev/null
}

# ---- the programs: the bundle unpacked, or built here ----------------------------
if [ -z "$BUNDLE" ]; then
  cd "$SCRIPTS/.."
  BUNDLE=${KILN_BUNDLE_BUILD:-build-gpu-bundle}/local
  REPORT=$SCRIPTS/gpu_report.py
  t0=$SECONDS
  echo "== build: scripts/gpu-bundle.sh --uncompressed $BUNDLE"
  if ! bash scripts/gpu-bundle.sh --uncompressed "$BUNDLE" > "$LOGS/build.log" 2>&1; then
    record build - failed $((SECONDS - t0)) 1 "$(tail -n 1 "$LOGS/build.log")"
    log_append build "$LOGS/build.log"
    FAILED=1
    BUNDLE=""
    finish
  fi
  record build - ok $((SECONDS - t0)) 0 "not counted in the budget"
  START=$SECONDS
fi
B=$(cd "$BUNDLE" && pwd -P)   # physical, as the loader's $ORIGIN is
BUNDLE=$B
REPORT=$B/gpu_report.py
# shellcheck source=/dev/null
. "$B/bundle.env"
fact bundle "kiln $KILN_VERSION, commit $BUNDLE_COMMIT, built $BUNDLE_DATE against glibc $GLIBC_BUILT (needs $GLIBC_NEEDED)"
cmp -s "$0" "$B/gpu-check.sh" ||
  fact script "this gpu-check.sh is not the bundle's: the bundle's report and peers scripts run with it"

# ---- 0. glibc, the archives, the loader's view --------------------------------------
here=$(ldd --version 2>/dev/null | head -n 1 | awk '{print $NF}')
[ -n "$here" ] || here=$(getconf GNU_LIBC_VERSION | awk '{print $NF}')
fact glibc "$here here; the bundle was built against $GLIBC_BUILT"
if [ "$(printf '%s\n%s\n' "$GLIBC_BUILT" "$here" | sort -V | head -n 1)" != "$GLIBC_BUILT" ]; then
  record glibc - "failed: glibc $here is older than the bundle's $GLIBC_BUILT" 0 ""
  FAILED=1
  finish
fi

unpack() {   # every archive into $R, after their sha256 (xz, or Python's lzma where xz is absent)
  (cd "$B" && sha256sum -c --quiet SHA256SUMS) || { echo "the archives do not match SHA256SUMS"; return 1; }
  for a in "$B"/*.tar.xz; do
    if command -v xz > /dev/null; then xz -dc -T0 "$a" | tar -x -C "$R" || return 1
    else python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$a" "$R" || return 1; fi
  done
  ln -s "$B/src" "$R/src"   # the suites' data, left uncompressed
  du -shL "$R"
}

# Every program and libkiln as the loader maps them with nothing of ours in
# the environment (what ldd -r asks of it: every symbol bound too): each
# library inside the bundle or one of glibc's. The other libraries load only
# through these, whose run path is what finds them.
self_contained() {
  local f line bad=0 n=0
  for f in "$R"/bin/* "$R"/lib/libkiln.so.*; do
    n=$((n + 1))
    while read -r line; do
      case $line in
        *"not found"*|*"undefined symbol"*) echo "${f#"$R"/}: $line"; bad=1 ;;
        *" => $R/"*) ;;
        *" => /"*) case " $SYSTEM_LIBRARIES " in *" ${line%% *} "*) ;; *) echo "${f#"$R"/}: $line: outside the bundle"; bad=1 ;; esac ;;
      esac
    done < <(env -u LD_LIBRARY_PATH -u LD_PRELOAD LD_TRACE_LOADED_OBJECTS=1 LD_BIND_NOW=1 LD_WARN=1 \
             /lib64/ld-linux-x86-64.so.2 "$f" 2>&1)
  done
  echo "$n programs and libkiln: every library they load is the bundle's, but glibc's ($SYSTEM_LIBRARIES)"
  return $bad
}
export -f unpack self_contained
export B R SYSTEM_LIBRARIES

if [ -d "$B/bin" ]; then
  R=$B   # uncompressed (the plain check)
else
  R=$WORK/bundle
  mkdir -p "$R"
  R=$(cd "$R" && pwd -P)
  run_step unpack 60 unpack || finish
fi
run_step self-contained 60 self_contained || finish

# ---- 1. the device ----------------------------------------------------------------
if command -v nvidia-smi > /dev/null 2>&1; then
  fact nvidia-smi "$(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,memory.used \
    --format=csv,noheader 2>&1 | head -n 1)"
else
  fact nvidia-smi "not found"
fi
PYTHON=$(command -v python3 || echo python3)
fact python3 "$("$PYTHON" --version 2>&1) at $PYTHON"
fact cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $JOBS cores"
demo_says() {   # kiln_cuda_is_available, as the demo prints it; yes is the only pass on a GPU
  local out
  out=$("$R/bin/demo" 2>&1)
  echo "$out"
  grep -q "^cuda available: $1" <<< "$out"
}
export -f demo_says
run_step available 30 demo_says "$([ $DRY = 1 ] && echo no || echo yes)"
# NVRTC and cuBLASLt are dlopened by soname, then from the build machine's
# toolkit directory, and NVRTC opens its builtins library by soname: where
# the loader's cache lacks them, the toolkit's library directory (beside
# nvcc, or under /usr/local/cuda*) goes on LD_LIBRARY_PATH, which the
# bundle's own libraries do not depend on (their run path comes first).
toolkit_dir() {
  local d nvcc
  nvcc=$(command -v nvcc 2>/dev/null) && set -- "$(dirname "$nvcc")/../lib64" "$(dirname "$nvcc")/../lib"
  for d in "$@" /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/targets/x86_64-linux/lib; do
    [ -f "$d/libnvrtc.so.13" ] && { (cd "$d" && pwd -P); return 0; }
  done
  return 1
}
PEERS_ENV=(env)   # PyTorch brings its own CUDA libraries: the machine's LD_LIBRARY_PATH for it, as it was
[ -n "${LD_LIBRARY_PATH+set}" ] && PEERS_ENV+=(LD_LIBRARY_PATH="$LD_LIBRARY_PATH") || PEERS_ENV+=(-u LD_LIBRARY_PATH)
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc-builtins\.so\.13'; then
  if d=$(toolkit_dir); then
    export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fact toolkit "NVRTC is not in the loader's cache: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  else
    fact toolkit "NVRTC (libnvrtc.so.13) is neither in the loader's cache nor under /usr/local/cuda*"
  fi
fi
run_step device 30 "$R/bin/kiln_bench" --device cuda:0 --info 1

# ---- 2. the first kernel, kiln_rand on both devices, the transfers ---------------------
run_step first-kernel 60 "$R/bin/kiln_bench" --device cuda:0 --info 2 --json "$OUT/prologue.json"

# ---- 3, 4. the GPU suites ----------------------------------------------------------------
if [ $DRY = 1 ]; then
  # The GPU suites as a machine without one runs them (the host's part, the
  # skips), then the guard itself: without a GPU the required tests fail.
  run_suites gpu-suites 120 gpu
  guard() {
    local out rc
    out=$(cd "$WORK" && KILN_REQUIRE_GPU=1 CK_RUN_CASE=gpu "$R/bin/test_cuda_runtime" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 1 ] && grep -q 'KILN_REQUIRE_GPU=1 but no CUDA device' <<< "$out" &&
      echo "ok: without a GPU, KILN_REQUIRE_GPU=1 fails the GPU tests"
  }
  export -f guard
  export WORK
  run_step require-gpu 60 guard
  not_run gpu-validate "no GPU"
else
  run_suites gpu-suites 75 gpu KILN_REQUIRE_GPU=1
  run_suites gpu-validate 75 gpu KILN_REQUIRE_GPU=1 KILN_VALIDATE=1
fi

# ---- 5. the GPU benchmarks and their peers -----------------------------------------------
run_step bench 100 "$R/bin/kiln_bench" --device cuda:0 --only W1,W2,W3,W4,W5,W6,W7 --runs 7 --json "$OUT/bench.json"
if [ $DRY = 1 ]; then
  run_step peers 60 "${PEERS_ENV[@]}" "$PYTHON" "$B/gpu_peers.py" "$OUT" --dry-run
else
  OPTIONAL=1 run_step peers 120 "${PEERS_ENV[@]}" "$PYTHON" "$B/gpu_peers.py" "$OUT"
fi

# ---- 6. everything else ---------------------------------------------------------------------
# kiln_bench's other GPU rows first, on an idle machine; then the other
# suites, sharing the cores, two threads each.
run_step bench-rest 100 "$R/bin/kiln_bench" --device cuda:0 --only W9-mlp,W10,W11,W12,W13,Wm,W15,W16 --runs 5 \
  --json "$OUT/bench-rest.json"
if [ $DRY = 1 ]; then
  run_suites other-suites 120 rest KILN_NUM_THREADS=2
else
  run_suites other-suites 240 rest KILN_NUM_THREADS=2 KILN_REQUIRE_GPU=1
fi
while IFS=$'\t' read -r name why; do record other-suites "$name" "not run: $why" 0 ""; done < "$B/not-bundled.tsv"

finish
