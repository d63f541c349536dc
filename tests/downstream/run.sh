#!/usr/bin/env bash
# Downstream tests: use libsdpa the way a user does, from an installed
# prefix, with nothing of the build tree. Driven by ctest
# (tests/downstream/CMakeLists.txt), which sets these variables:
#
#   SDPA_BUILD_DIR   the top build directory (installed from)
#   SDPA_WORK        scratch directory for this test family
#   SDPA_LIBDIR      CMAKE_INSTALL_LIBDIR (relative)
#   SDPA_VERSION     the project version parsed from include/sdpa.h
#   SDPA_CONFIG      the build configuration (for cmake --install)
#   SDPA_STATIC      ON when libsdpa.a is built (SDPA_BUILD_STATIC)
#   CC, CFLAGS, LDFLAGS   compiler, the project's warning set (+ sanitizers)
#   CMAKE, CMAKE_GENERATOR, CMAKE_MAKE_PROGRAM
#
#   run.sh install           cmake --install into $SDPA_WORK/prefix
#   run.sh pkgconfig-shared  cc ... $(pkg-config --cflags --libs sdpa)
#   run.sh pkgconfig-static  cc ... $(pkg-config --static --libs sdpa), libsdpa.a
#   run.sh cmake             find_package(sdpa 1 CONFIG REQUIRED) + sdpa::sdpa
#   run.sh version           header == runtime == .pc == CMake package version
#   run.sh readme            the first ```c block of README.md compiles and runs
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=$SDPA_WORK/prefix
libdir=$prefix/$SDPA_LIBDIR
src=$here/attention_check.c
export PKG_CONFIG_PATH=$libdir/pkgconfig
# Only the prefix: never pick up a system-wide sdpa.pc by accident.
unset PKG_CONFIG_LIBDIR 2>/dev/null || true

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

need_prefix() {
    [ -f "$libdir/pkgconfig/sdpa.pc" ] ||
        fail "no installed prefix at $prefix (test downstream_install failed?)"
}

run() {
    echo "+ $*"
    "$@"
}

case $1 in
install)
    rm -rf "$prefix"
    run "$CMAKE" --install "$SDPA_BUILD_DIR" --prefix "$prefix" \
        ${SDPA_CONFIG:+--config "$SDPA_CONFIG"}
    files=(include/sdpa.h "$SDPA_LIBDIR/libsdpa.so.$SDPA_VERSION"
        "$SDPA_LIBDIR/libsdpa.so.${SDPA_VERSION%%.*}" "$SDPA_LIBDIR/libsdpa.so"
        "$SDPA_LIBDIR/pkgconfig/sdpa.pc"
        "$SDPA_LIBDIR/cmake/sdpa/sdpaConfig.cmake"
        "$SDPA_LIBDIR/cmake/sdpa/sdpaConfigVersion.cmake"
        "$SDPA_LIBDIR/cmake/sdpa/sdpaTargets.cmake")
    if [ "$SDPA_STATIC" = ON ]; then
        files+=("$SDPA_LIBDIR/libsdpa.a")
    fi
    for f in "${files[@]}"; do
        [ -e "$prefix/$f" ] || fail "not installed: $f"
    done
    grep -qx "prefix=$prefix" "$libdir/pkgconfig/sdpa.pc" ||
        fail "sdpa.pc does not say prefix=$prefix"
    echo "installed to $prefix"
    ;;
pkgconfig-shared)
    need_prefix
    out=$SDPA_WORK/check-pc-shared
    pc_version=$(pkg-config --modversion sdpa)
    # shellcheck disable=SC2086,SC2046 # flags are split on purpose
    run "$CC" $CFLAGS "-DSDPA_EXPECTED_VERSION=\"$pc_version\"" "$src" \
        -o "$out" $(pkg-config --cflags --libs sdpa) $LDFLAGS
    # Captured, not piped: under pipefail, grep -q exiting at its first
    # match can kill readelf with SIGPIPE and fail the check by chance.
    needed=$(readelf -d "$out")
    grep -q 'NEEDED.*\[libsdpa\.so\.1\]' <<<"$needed" ||
        fail "$out does not link libsdpa.so.1 dynamically"
    LD_LIBRARY_PATH=$libdir run "$out"
    ;;
pkgconfig-static)
    need_prefix
    out=$SDPA_WORK/check-pc-static
    libs=" $(pkg-config --static --libs sdpa) "
    # -lsdpa would pick libsdpa.so; name the archive itself instead.
    libs=${libs// -lsdpa / $libdir/libsdpa.a }
    # shellcheck disable=SC2086,SC2046
    run "$CC" $CFLAGS $(pkg-config --static --cflags sdpa) "$src" -o "$out" \
        $libs $LDFLAGS
    needed=$(readelf -d "$out")
    if grep -q 'NEEDED.*libsdpa' <<<"$needed"; then
        fail "$out still needs libsdpa.so"
    fi
    run "$out"
    ;;
cmake)
    need_prefix
    bdir=$SDPA_WORK/cmake-project
    rm -rf "$bdir"
    run "$CMAKE" -S "$here/cmake-project" -B "$bdir" \
        ${CMAKE_GENERATOR:+-G "$CMAKE_GENERATOR"} \
        ${CMAKE_MAKE_PROGRAM:+-DCMAKE_MAKE_PROGRAM="$CMAKE_MAKE_PROGRAM"} \
        -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" \
        -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" \
        -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
        -DSDPA_EXPECT_VERSION="$SDPA_VERSION"
    run "$CMAKE" --build "$bdir"
    # The shared one runs through the build RPATH CMake gives imported
    # targets: no LD_LIBRARY_PATH.
    run "$bdir/check_shared"
    if [ "$SDPA_STATIC" = ON ]; then
        run "$bdir/check_static"
    fi
    ;;
version)
    need_prefix
    v=$SDPA_VERSION
    IFS=. read -r major minor patch <<<"$v"
    number=$((major * 10000 + minor * 100 + patch))
    hdr=$prefix/include/sdpa.h
    h_major=$(sed -n 's/^#define SDPA_VERSION_MAJOR \([0-9]*\)$/\1/p' "$hdr")
    h_minor=$(sed -n 's/^#define SDPA_VERSION_MINOR \([0-9]*\)$/\1/p' "$hdr")
    h_patch=$(sed -n 's/^#define SDPA_VERSION_PATCH \([0-9]*\)$/\1/p' "$hdr")
    header_v=$h_major.$h_minor.$h_patch
    pc_v=$(pkg-config --modversion sdpa)
    cmake_v=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' \
        "$libdir/cmake/sdpa/sdpaConfigVersion.cmake")
    out=$SDPA_WORK/check-version
    # shellcheck disable=SC2086,SC2046
    "$CC" $CFLAGS "$src" -o "$out" $(pkg-config --cflags --libs sdpa) $LDFLAGS
    read -r _ c_header _ runtime_v _ runtime_n < <(LD_LIBRARY_PATH=$libdir "$out" --version)
    soname=$(readelf -d "$libdir/libsdpa.so" |
        sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    printf '%-28s %s\n' \
        "project (CMake parse)" "$v" \
        "installed sdpa.h macros" "$header_v" \
        "SDPA_VERSION_STRING" "$c_header" \
        "sdpa_version_string()" "$runtime_v" \
        "sdpa_version_number()" "$runtime_n (expected $number)" \
        "pkg-config --modversion" "$pc_v" \
        "sdpaConfigVersion.cmake" "$cmake_v" \
        "SONAME" "$soname (expected libsdpa.so.$major)"
    for x in "$header_v" "$c_header" "$runtime_v" "$pc_v" "$cmake_v"; do
        [ "$x" = "$v" ] || fail "version mismatch: '$x' != '$v'"
    done
    [ "$runtime_n" = "$number" ] || fail "sdpa_version_number() $runtime_n != $number"
    [ "$soname" = "libsdpa.so.$major" ] || fail "SONAME $soname"
    [ -e "$libdir/libsdpa.so.$v" ] || fail "no $libdir/libsdpa.so.$v"
    echo "all versions agree: $v"
    ;;
readme)
    need_prefix
    readme=$here/../../README.md
    ex=$SDPA_WORK/readme_example.c
    awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on { print }' \
        "$readme" >"$ex"
    [ -s "$ex" ] || fail "no \`\`\`c block in $readme"
    out=$SDPA_WORK/readme_example
    # shellcheck disable=SC2086,SC2046
    run "$CC" $CFLAGS "$ex" -o "$out" $(pkg-config --cflags --libs sdpa) $LDFLAGS
    got=$(LD_LIBRARY_PATH=$libdir "$out")
    echo "$got"
    [ "$got" = "0.6698 0.3302 0.0000" ] ||
        fail "README example printed '$got', expected '0.6698 0.3302 0.0000'"
    ;;
*)
    echo "usage: $0 install|pkgconfig-shared|pkgconfig-static|cmake|version|readme" >&2
    exit 2
    ;;
esac
