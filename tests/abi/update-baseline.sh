#!/usr/bin/env bash
# Regenerate tests/abi/libsdpa.abi, the abidw baseline that ctest abi_abidiff
# compares the built library against. Run it from a clean checkout of the
# release that defines the ABI (see docs/ABI.md), on x86-64 Debian 12 with
# gcc and abigail-tools, then review and commit the diff.
#
#   tests/abi/update-baseline.sh            # builds in a temporary directory
#   tests/abi/update-baseline.sh BUILD_DIR  # uses an existing build of sdpa
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
out=$src/tests/abi/libsdpa.abi

if [ $# -ge 1 ]; then
    build=$(cd "$1" && pwd)
else
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=gcc \
        -DCMAKE_BUILD_TYPE=Release -DSDPA_DEBUG_INFO=ON \
        -DSDPA_BUILD_TESTS=OFF -DSDPA_BUILD_TOOLS=OFF -DSDPA_BUILD_BENCH=OFF \
        -DSDPA_BUILD_STATIC=OFF >/dev/null
fi
cmake --build "$build" --target sdpa -j "$(nproc)" >/dev/null

lib=$(find "$build" -maxdepth 1 -name 'libsdpa.so.*.*.*' -type f -print -quit)
[ -n "$lib" ] || { echo "no libsdpa.so.X.Y.Z in $build" >&2; exit 1; }

# Reproducible: no corpus or build paths, locations as file names only, no
# DT_NEEDED (it names the CBLAS), hashed type ids; only the exported
# functions and the types of the public header they reach (the context
# stays opaque, internal declarations stay out). The translation units'
# paths are made relative to the source tree.
# Do NOT use --no-show-locs: abidiff --hd2 then cannot tell public types
# from private ones and silently filters out changes to public structs.
abidw --no-corpus-path --no-comp-dir-path --short-locs --no-elf-needed \
    --exported-interfaces-only \
    --type-id-style hash \
    --headers-dir "$src/include" --drop-private-types \
    --out-file "$out" "$lib"
sed -i "s|path='$src/|path='|" "$out"
if grep -n "$src" "$out"; then
    echo "warning: $out still names the source tree $src" >&2
fi

# Self-check: the new baseline must compare clean against the library, the
# same two ways as ctest abi_abidiff.
abidiff --hd2 "$src/include" --drop-private-types "$out" "$lib"
abidiff "$out" "$lib"
echo "wrote $out from $lib"
