#!/bin/sh
# exports.sh SHARED STATIC: libkiln.so must export exactly the kiln_*
# functions that libkiln.a defines. A non-kiln_ symbol in the dynamic table
# is an internal leaking out; a kiln_ function missing from it lacks KILN_API
# in include/kiln.h. The linker's own symbols (_init, _edata, ...) are allowed.
# It must not need a CUDA library either: those are dlopened (ir/dynlib.c).
set -eu
shared=$1 static=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$shared" | awk '{print $NF}' |
  grep -Ev '^(_init|_fini|_edata|_end|__bss_start)$' | sort -u > "$tmp/exported"
nm --defined-only "$static" | awk '$2 == "T" && $3 ~ /^kiln_/ {print $3}' | sort -u > "$tmp/public"
status=0
if grep -v '^kiln_' "$tmp/exported" > "$tmp/leaked"; then
  echo "exported from $shared but not kiln_ (internal symbols must stay hidden):"
  sed 's/^/  /' "$tmp/leaked"
  status=1
fi
if comm -13 "$tmp/exported" "$tmp/public" | grep . > "$tmp/hidden"; then
  echo "defined in $static but not exported from $shared (add KILN_API to its declaration in kiln.h):"
  sed 's/^/  /' "$tmp/hidden"
  status=1
fi
if readelf -d "$shared" | grep -Ei 'NEEDED.*(cuda|nvrtc|cublas)'; then
  echo "$shared needs a CUDA library at start-up; load it with ir_dl_load instead"
  status=1
fi
if [ ! -s "$tmp/public" ]; then
  echo "no kiln_ functions found in $static"
  status=1
fi
[ $status -eq 0 ] && echo "$(wc -l < "$tmp/exported") symbols exported, all kiln_"
exit $status
