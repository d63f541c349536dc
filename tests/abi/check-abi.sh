#!/usr/bin/env bash
# The ABI gates of libsdpa.so, run by ctest (tests/abi/CMakeLists.txt).
#
#   check-abi.sh soname   LIB SRCDIR VERSION   SONAME and file name
#   check-abi.sh exports  LIB SRCDIR           nm -D == exports.txt == map == header
#   check-abi.sh versions LIB SRCDIR           every export has its map node (@@)
#   check-abi.sh abidiff  LIB SRCDIR           abidiff against libsdpa.abi is 0
set -euo pipefail

mode=$1 lib=$2 src=$3
abidir=$src/tests/abi
map=$src/cmake/libsdpa.map
header=$src/include/sdpa.h

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Defined dynamic symbols as "name@@NODE" (or plain name if unversioned),
# without the version-node definitions themselves (type A).
dynamic_exports() {
    nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sort
}

# "name NODE" for every global name in the version script.
map_names() {
    sed -e '/\/\*/,/\*\//d' "$map" | awk '
        /^[A-Za-z_][A-Za-z0-9_.]* *\{/ { node = $1; scope = ""; next }
        /^ *global *: *$/ { scope = "global"; next }
        /^ *local *: *$/  { scope = "local"; next }
        /^ *\}/ { node = ""; next }
        node != "" && scope == "global" && /^ *[A-Za-z_][A-Za-z0-9_]* *; *$/ {
            gsub(/[ ;]/, ""); print $0, node }' | sort
}

case $mode in
soname)
    version=$4
    major=${version%%.*}
    want="libsdpa.so.$major"
    got=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*Library soname: \[\(.*\)\].*/\1/p')
    [ "$got" = "$want" ] || fail "SONAME is '$got', expected '$want'"
    real=$(basename "$(readlink -f "$lib")")
    [ "$real" = "libsdpa.so.$version" ] ||
        fail "library file is '$real', expected 'libsdpa.so.$version'"
    echo "SONAME $got, file $real"
    ;;
exports)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    grep -v -e '^#' -e '^$' "$abidir/exports.txt" | sort >"$tmp/list"
    dynamic_exports | sed 's/@.*//' >"$tmp/nm"
    map_names | awk '{ print $1 }' >"$tmp/map"
    grep -E '^SDPA_API ' "$header" |
        sed -E 's/^SDPA_API [^(]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/' |
        sort >"$tmp/header"
    status=0
    for what in nm map header; do
        if ! diff -u --label tests/abi/exports.txt --label "$what" \
            "$tmp/list" "$tmp/$what"; then
            echo "FAIL: exports.txt and $what differ (see diff above)" >&2
            status=1
        fi
    done
    [ $status -eq 0 ] || exit 1
    echo "$(wc -l <"$tmp/list") exports agree: nm -D, exports.txt, libsdpa.map, sdpa.h"
    ;;
versions)
    declare -A node_of
    while read -r name node; do node_of[$name]=$node; done < <(map_names)
    n=0
    while read -r sym; do
        name=${sym%%@*}
        want=${node_of[$name]:-}
        [ -n "$want" ] || fail "$sym is exported but not listed in libsdpa.map"
        [ "$sym" = "$name@@$want" ] ||
            fail "$sym: expected default version $name@@$want"
        n=$((n + 1))
    done < <(dynamic_exports)
    [ $n -gt 0 ] || fail "no exported symbols found in $lib"
    echo "$n exports, each with its version node"
    ;;
abidiff)
    baseline=$abidir/libsdpa.abi
    [ -f "$baseline" ] ||
        fail "no baseline $baseline; run tests/abi/update-baseline.sh (docs/ABI.md)"
    # Captured first: under pipefail, grep -q exiting at its first match
    # can kill readelf with SIGPIPE and fail the pipeline by chance.
    sections=$(readelf -S "$lib")
    grep -q '\.debug_info' <<<"$sections" ||
        fail "$lib has no DWARF; configure with -DSDPA_DEBUG_INFO=ON"
    # Twice: filtered to the public header's types (what the baseline
    # holds), and unfiltered, so that a baseline written with options that
    # blind the filter (e.g. abidw --no-show-locs) cannot hide a change.
    run_abidiff() {
        echo "+ abidiff $*"
        set +e
        abidiff "$@"
        rc=$?
        set -e
        [ $rc -eq 0 ] || fail "abidiff exit status $rc (bits: 1 error," \
            "2 usage, 4 ABI change, 8 incompatible change); see docs/ABI.md"
    }
    run_abidiff --hd2 "$src/include" --drop-private-types "$baseline" "$lib"
    run_abidiff "$baseline" "$lib"
    echo "abidiff: no ABI change against tests/abi/libsdpa.abi"
    ;;
*)
    echo "usage: $0 soname|exports|versions|abidiff LIB SRCDIR [VERSION]" >&2
    exit 2
    ;;
esac
