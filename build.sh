#!/usr/bin/env bash
# libsdpa quick start (README.md). On Debian 12, as root, from a fresh clone:
#
#   ./build.sh demo   build the library and the sdpa tool, run `sdpa demo`
#   ./build.sh test   build everything with -Werror, run the whole ctest suite
#                     (CMocka tests, ABI gates, downstream install tests)
#
# Missing Debian packages are installed with apt-get when run as root;
# otherwise the exact apt-get line is printed and the script exits 1.
# Environment: BUILD_DIR (default: build), JOBS (default: nproc).
set -euo pipefail

cd "$(dirname "$0")"
mode=${1:-}
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

demo_packages=(cmake make gcc libc6-dev pkg-config libopenblas-dev)
# libgfortran-12-dev: the static link test (pkg-config --static) gets
# -lgfortran from openblas.pc's Libs.private; libopenblas-dev does not bring
# the linker name libgfortran.so, so ld would fail: cannot find -lgfortran.
# groff-base: the man pages' lint (ctest man_pages_lint, tool_man_page).
# python3-numpy, python3-pytest, python3-venv: the Python package's tests
# (ctest -L python; python_pip installs it into a venv).
test_packages=("${demo_packages[@]}" libcmocka-dev abigail-tools binutils
    libgfortran-12-dev groff-base python3-numpy python3-pytest python3-venv)

usage() {
    echo "usage: ./build.sh demo|test" >&2
    echo "  demo  build libsdpa and run 'sdpa demo'" >&2
    echo "  test  build everything (-Werror) and run the whole test suite" >&2
    exit 2
}

ensure_packages() {
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "build.sh: not a Debian system; make sure these are installed:" \
            "$*" >&2
        return 0
    fi
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
            grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "build.sh: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y "${missing[@]}"
    else
        echo "build.sh: missing Debian packages; as root, run:" >&2
        echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
}

case $mode in
demo)
    ensure_packages "${demo_packages[@]}"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DSDPA_BUILD_TESTS=OFF -DSDPA_WERROR=OFF
    cmake --build "$build" --target sdpa_tool -j "$jobs"
    "$build/tools/sdpa" demo
    ;;
test)
    ensure_packages "${test_packages[@]}"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release \
        -DSDPA_BUILD_TESTS=ON -DSDPA_WERROR=ON
    cmake --build "$build" -j "$jobs"
    ctest --test-dir "$build" --output-on-failure -j "$jobs"
    ;;
*)
    usage
    ;;
esac
