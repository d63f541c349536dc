#!/usr/bin/env bash
# ctest mpi_abi_exports: libsdpa_mpi.so's SONAME is libsdpa_mpi.so.MAJOR, and
# its exports (nm -D --defined-only, each name@@LIBSDPA_MPI_*) equal
# mpi/tests/exports.txt, the global names of mpi/libsdpa_mpi.map and the
# SDPA_MPI_API declarations of mpi/include/sdpa_mpi.h.
#
#   check-exports.sh LIB MPIDIR
set -euo pipefail
lib=$1 dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

major=$(sed -n 's/^#define SDPA_MPI_VERSION_MAJOR \([0-9]*\)$/\1/p' \
    "$dir/include/sdpa_mpi.h")
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libsdpa_mpi.so.$major" ] || {
    echo "FAIL: SONAME is '$soname', expected libsdpa_mpi.so.$major" >&2
    exit 1
}

grep -v -e '^#' -e '^$' "$dir/tests/exports.txt" | sort >"$tmp/list"
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sort >"$tmp/versioned"
sed 's/@.*//' "$tmp/versioned" >"$tmp/nm"
sed -e '/\/\*/,/\*\//d' "$dir/libsdpa_mpi.map" |
    awk '/^ *global *: *$/ { g = 1; next } /^ *local *: *$/ { g = 0 }
         /^ *\}/ { g = 0 } g && /^ *[A-Za-z_][A-Za-z0-9_]* *; *$/ {
         gsub(/[ ;]/, ""); print }' | sort >"$tmp/map"
grep -E '^SDPA_MPI_API ' "$dir/include/sdpa_mpi.h" |
    sed -E 's/^SDPA_MPI_API [^(]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/' |
    sort >"$tmp/header"
status=0
for what in nm map header; do
    if ! diff -u --label exports.txt --label "$what" "$tmp/list" "$tmp/$what"; then
        echo "FAIL: exports.txt and $what differ" >&2
        status=1
    fi
done
if grep -v -E '@@LIBSDPA_MPI_1\.[01]$' "$tmp/versioned"; then
    echo "FAIL: exports above lack a version node LIBSDPA_MPI_1.0 or 1.1" >&2
    status=1
fi
[ $status -eq 0 ] || exit 1
echo "SONAME $soname; $(wc -l <"$tmp/list") exports agree: nm -D, exports.txt, map, header"
