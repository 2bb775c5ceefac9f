#!/usr/bin/env bash
# run.sh: installs kiln into a temporary prefix (`make install PREFIX=...`)
# and builds main.c the three ways a project uses kiln: pkg-config (kiln and
# kiln-static), find_package(kiln) and add_subdirectory, each linked shared
# and static. Every program's output must equal expected.txt. .ci/run calls
# this after the tests; CMAKE_FLAGS (as for make) also reaches the consumers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
flags=(${CMAKE_FLAGS:-})

# quiet LOG CMD...: runs CMD with its output in LOG, shown only on failure.
quiet() {
  local log=$work/$1.log
  shift
  "$@" > "$log" 2>&1 || { cat "$log"; echo "consumers: failed: $*"; exit 1; }
}

# check NAME EXE shared|static: EXE prints expected.txt and links libkiln.so
# exactly when it should.
check() {
  local linked=static
  readelf -d "$2" | grep -q 'NEEDED.*\[libkiln\.so\.' && linked=shared
  [ "$linked" = "$3" ] || { echo "consumers: $1 is linked $linked, not $3"; exit 1; }
  "$2" > "$work/$1.out"
  diff -u "$here/expected.txt" "$work/$1.out" || { echo "consumers: $1 printed something else"; exit 1; }
  echo "consumers: $1 ok ($3)"
}

quiet install make -C "$root" install PREFIX="$prefix"
echo "consumers: installed into $prefix:"
(cd "$prefix" && find . \( -type f -o -type l \) | sort | sed 's|^\./|  |')

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# The tour prints how many kernels it compiled: no disk cache, so every
# consumer compiles as the first one did.
export KILN_CACHE=0
libdir=$(pkg-config --variable=libdir kiln)
quiet pc-shared cc -o "$work/pc-shared" "$here/main.c" $(pkg-config --cflags --libs kiln) -Wl,-rpath,"$libdir"
quiet pc-static cc -o "$work/pc-static" "$here/main.c" $(pkg-config --cflags --libs kiln-static)
check pkg-config-kiln "$work/pc-shared" shared
check pkg-config-kiln-static "$work/pc-static" static

quiet fp-configure cmake -S "$here/find_package" -B "$work/fp" -DCMAKE_PREFIX_PATH="$prefix" "${flags[@]}"
quiet fp-build cmake --build "$work/fp" -j "$(nproc)"
check find_package-kiln::kiln "$work/fp/consumer" shared
check find_package-kiln::kiln_static "$work/fp/consumer_static" static

quiet as-configure cmake -S "$here/add_subdirectory" -B "$work/as" "${flags[@]}"
quiet as-build cmake --build "$work/as" -j "$(nproc)"
# As a subproject kiln builds no tests, examples or benchmarks (nor needs Check).
for d in tests examples bench; do
  [ ! -e "$work/as/kiln/$d" ] || { echo "consumers: add_subdirectory built kiln's $d"; exit 1; }
done
check add_subdirectory-kiln::kiln "$work/as/consumer" shared
check add_subdirectory-kiln::kiln_static "$work/as/consumer_static" static
