#!/usr/bin/env bash
# Downstream tests of libsdpa-mpi: use it the way a user does, from the
# prefix tests/downstream installs (ctest fixture sdpa_prefix: cmake
# --install of the whole build, libsdpa-mpi included), with nothing of the
# build tree, and run the result under mpirun. The same as
# tests/downstream/run.sh for libsdpa; driven by ctest
# (mpi/tests/CMakeLists.txt), which sets, besides the MPI environment of
# the mpirun tests (OMPI_MCA_*):
#
#   SDPA_PREFIX      the installed prefix (tests/downstream's)
#   SDPA_WORK        scratch directory for these tests
#   SDPA_LIBDIR      CMAKE_INSTALL_LIBDIR (relative)
#   SDPA_MPI_VERSION the version parsed from mpi/include/sdpa_mpi.h
#   MPICC            the MPI compiler wrapper FindMPI found
#   MPIEXEC          mpiexec; MPIEXEC_FLAGS its flags (--allow-run-as-root
#                    --oversubscribe for Open MPI), MPIEXEC_NP_FLAG -n/-np
#   CC, CFLAGS, LDFLAGS   compiler, the project's warning set (+ sanitizers)
#   CMAKE, CMAKE_GENERATOR, CMAKE_MAKE_PROGRAM
#
#   run.sh install     the prefix holds libsdpa-mpi, sdpa-mpi.pc says it
#   run.sh mpicc       mpicc ... $(pkg-config --cflags --libs sdpa-mpi)
#   run.sh pkgconfig   cc ... $(pkg-config --cflags --libs sdpa-mpi): the
#                      .pc carries MPI's flags, no wrapper needed
#   run.sh cmake       find_package(sdpa_mpi 1 CONFIG REQUIRED) +
#                      sdpa::sdpa_mpi
#   run.sh relocated   the prefix moved elsewhere: the CMake package found
#                      through sdpa_mpi_DIR alone, pkg-config with
#                      --define-prefix; nothing may still point at the old
#                      prefix
# Every program runs as "$MPIEXEC $MPIEXEC_FLAGS $MPIEXEC_NP_FLAG 2 mpi_check".
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prefix=$SDPA_PREFIX
libdir=$prefix/$SDPA_LIBDIR
src=$here/mpi_check.c
export PKG_CONFIG_PATH=$libdir/pkgconfig
# Only the prefix: never pick up a system-wide sdpa-mpi.pc by accident.
unset PKG_CONFIG_LIBDIR 2>/dev/null || true
# mpicc compiles with the project's compiler, so that the warning set and
# sanitizer flags mean what they mean for everything else built here
# (Open MPI's and MPICH's wrappers read these).
export OMPI_CC=$CC MPICH_CC=$CC

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

need_prefix() {
    [ -f "$libdir/pkgconfig/sdpa-mpi.pc" ] ||
        fail "no libsdpa-mpi in the prefix $prefix (test downstream_install or downstream_mpi_install failed?)"
}

run() {
    echo "+ $*"
    "$@"
}

# Runs a built mpi_check on 2 ranks; $1 is the program, the environment
# (LD_LIBRARY_PATH) is the caller's.
run_ranks() {
    # shellcheck disable=SC2086 # the flags are split on purpose
    run "$MPIEXEC" $MPIEXEC_FLAGS "${MPIEXEC_NP_FLAG:--n}" 2 "$1"
}

# The program must load both libraries from directory $2.
loads_from() {
    local deps
    deps=$(ldd "$1")
    for lib in libsdpa.so.1 libsdpa_mpi.so.1; do
        grep -q "$lib => $2/$lib " <<<"$deps" ||
            fail "$1 does not load $lib from $2:
$deps"
    done
}

# A CMake project (cmake-project/) against the package; extra -D arguments
# say where to find it. Builds in $1.
cmake_project() {
    local bdir=$1
    shift
    rm -rf "$bdir"
    run "$CMAKE" -S "$here/cmake-project" -B "$bdir" \
        ${CMAKE_GENERATOR:+-G "$CMAKE_GENERATOR"} \
        ${CMAKE_MAKE_PROGRAM:+-DCMAKE_MAKE_PROGRAM="$CMAKE_MAKE_PROGRAM"} \
        -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" \
        -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" -DCMAKE_BUILD_TYPE=Release \
        -DSDPA_MPI_EXPECT_VERSION="$SDPA_MPI_VERSION" "$@"
    run "$CMAKE" --build "$bdir"
}

case $1 in
install)
    v=$SDPA_MPI_VERSION
    files=(include/sdpa_mpi.h include/sdpa.h
        "$SDPA_LIBDIR/libsdpa_mpi.so.$v" "$SDPA_LIBDIR/libsdpa_mpi.so.${v%%.*}"
        "$SDPA_LIBDIR/libsdpa_mpi.so" "$SDPA_LIBDIR/pkgconfig/sdpa-mpi.pc"
        "$SDPA_LIBDIR/cmake/sdpa_mpi/sdpa_mpiConfig.cmake"
        "$SDPA_LIBDIR/cmake/sdpa_mpi/sdpa_mpiConfigVersion.cmake"
        "$SDPA_LIBDIR/cmake/sdpa_mpi/sdpa_mpiTargets.cmake")
    for f in "${files[@]}"; do
        [ -e "$prefix/$f" ] || fail "not installed: $f"
    done
    # The prefix given to cmake --install, not the configured one.
    grep -qx "prefix=$prefix" "$libdir/pkgconfig/sdpa-mpi.pc" ||
        fail "sdpa-mpi.pc does not say prefix=$prefix"
    pc_v=$(pkg-config --modversion sdpa-mpi)
    [ "$pc_v" = "$v" ] || fail "pkg-config --modversion sdpa-mpi is $pc_v, not $v"
    soname=$(readelf -d "$libdir/libsdpa_mpi.so" |
        sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
    [ "$soname" = "libsdpa_mpi.so.${v%%.*}" ] || fail "SONAME $soname"
    echo "libsdpa-mpi $v installed in $prefix"
    ;;
mpicc)
    need_prefix
    out=$SDPA_WORK/check-mpicc
    # shellcheck disable=SC2086,SC2046 # flags are split on purpose
    run "$MPICC" $CFLAGS \
        "-DSDPA_MPI_EXPECTED_VERSION=\"$(pkg-config --modversion sdpa-mpi)\"" \
        "$src" -o "$out" $(pkg-config --cflags --libs sdpa-mpi) $LDFLAGS
    needed=$(readelf -d "$out")
    grep -q 'NEEDED.*\[libsdpa_mpi\.so\.1\]' <<<"$needed" ||
        fail "$out does not link libsdpa_mpi.so.1 dynamically"
    export LD_LIBRARY_PATH=$libdir
    loads_from "$out" "$libdir"
    run_ranks "$out"
    ;;
pkgconfig)
    need_prefix
    out=$SDPA_WORK/check-pkgconfig
    # shellcheck disable=SC2086,SC2046
    run "$CC" $CFLAGS "$src" -o "$out" $(pkg-config --cflags --libs sdpa-mpi) \
        $LDFLAGS
    export LD_LIBRARY_PATH=$libdir
    loads_from "$out" "$libdir"
    run_ranks "$out"
    ;;
cmake)
    need_prefix
    bdir=$SDPA_WORK/cmake-project
    cmake_project "$bdir" -DCMAKE_PREFIX_PATH="$prefix"
    # Through the build RPATH CMake gives imported targets: no
    # LD_LIBRARY_PATH.
    loads_from "$bdir/mpi_check" "$libdir"
    run_ranks "$bdir/mpi_check"
    ;;
relocated)
    need_prefix
    # A copy under another name stands for the moved prefix: the original
    # must stay for the other tests, so every path below is checked not to
    # lead back to it.
    moved=$SDPA_WORK/moved-prefix
    rm -rf "$moved"
    run cp -a "$prefix" "$moved"
    mlib=$moved/$SDPA_LIBDIR
    # CMake: the package file's directory alone; sdpa_mpiConfig.cmake finds
    # the libsdpa installed beside it (no CMAKE_PREFIX_PATH).
    bdir=$SDPA_WORK/cmake-relocated
    cmake_project "$bdir" -Dsdpa_mpi_DIR="$mlib/cmake/sdpa_mpi"
    for var in sdpa_mpi_DIR sdpa_DIR; do
        found=$(sed -n "s/^$var:[A-Z]*=//p" "$bdir/CMakeCache.txt")
        [ "$found" = "$mlib/cmake/${var%_DIR}" ] ||
            fail "$var is '$found', not $mlib/cmake/${var%_DIR}"
    done
    loads_from "$bdir/mpi_check" "$mlib"
    run_ranks "$bdir/mpi_check"
    # pkg-config: the .pc files name their prefix (as sdpa.pc does);
    # --define-prefix derives it from where the file now is.
    export PKG_CONFIG_PATH=$mlib/pkgconfig
    flags=$(pkg-config --define-prefix --cflags --libs sdpa-mpi)
    echo "pkg-config --define-prefix --cflags --libs sdpa-mpi: $flags"
    case " $flags " in
    *"$prefix/"* | *"$prefix "*) fail "the flags still name $prefix" ;;
    esac
    [[ " $flags " == *" -I$moved/include "* ]] || fail "no -I$moved/include"
    [[ " $flags " == *" -L$mlib "* ]] || fail "no -L$mlib"
    out=$SDPA_WORK/check-relocated
    # shellcheck disable=SC2086
    run "$MPICC" $CFLAGS "$src" -o "$out" $flags $LDFLAGS
    export LD_LIBRARY_PATH=$mlib
    loads_from "$out" "$mlib"
    run_ranks "$out"
    ;;
*)
    echo "usage: $0 install|mpicc|pkgconfig|cmake|relocated" >&2
    exit 2
    ;;
esac
