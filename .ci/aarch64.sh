#!/usr/bin/env bash
# aarch64 stage: the library cross-built for aarch64 and its tests run under
# qemu-user (Debian 12, root, 2 cores). About 25 minutes of CPU time, so
# 12 to 13 minutes on two idle cores (25 measured while another build
# shared them); 90 % of it the unit and tool tests, 20 to 40 times slower
# than natively (qemu computes floating point in software, and the tests'
# long double references are quad precision in software on aarch64):
#   1. install Debian's aarch64 cross toolchain (gcc-aarch64-linux-gnu),
#      qemu-user and, through multiarch (dpkg --add-architecture arm64),
#      the arm64 OpenBLAS, CMocka and C library (libopenblas-dev:arm64,
#      libcmocka-dev:arm64, libc6-dev:arm64). They are Multi-Arch: same and
#      install beside the amd64 ones the other stages use; apt-get runs
#      with --no-remove, so a conflict that would remove one stops here,
#   2. configure with cmake/toolchain-aarch64-linux-gnu.cmake (Release,
#      -Werror) and build everything: library, tool, tests, examples, bench,
#   3. run `ctest -L 'unit|tool|examples|abi'` under qemu-aarch64 (the
#      toolchain file's CMAKE_CROSSCOMPILING_EMULATOR: no binfmt needed;
#      the ABI gates' readelf and nm are the host's, which read aarch64
#      objects; abidiff's gate is not registered, its baseline is x86-64's).
#      The kernel sets are the portable ones (the AVX2 and AVX-512 sets are
#      x86's, not built); the tests that force them skip them with a
#      message,
#   4. say what is not run here, and why (the other labels need host tools
#      or an arm64 install of things this stage does not build).
# Environment: BUILD_DIR (default: build-aarch64), JOBS (default: nproc).
set -euo pipefail

cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-aarch64}
jobs=${JOBS:-$(nproc)}
t_start=$SECONDS

say() { echo "aarch64: $*"; }

say "=== packages: cross toolchain, qemu-user, arm64 libraries (multiarch)"
export DEBIAN_FRONTEND=noninteractive
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
fi
apt-get update
apt-get install -y --no-remove \
    gcc-aarch64-linux-gnu qemu-user cmake make pkg-config binutils \
    libc6-dev:arm64 libopenblas-dev:arm64 libcmocka-dev:arm64
t_install=$((SECONDS - t_start))

t0=$SECONDS
say "=== cross build: gcc $(aarch64-linux-gnu-gcc -dumpfullversion), Release, -Werror"
rm -rf "$build"
cmake -S . -B "$build" \
    -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake \
    -DCMAKE_BUILD_TYPE=Release \
    -DSDPA_WERROR=ON \
    -DSDPA_BUILD_TESTS=ON \
    -DSDPA_BUILD_MPI=OFF \
    -DSDPA_PYTHON=OFF
cmake --build "$build" -j "$jobs"
t_build=$((SECONDS - t0))

# The binaries are aarch64's: make sure, before their tests say anything.
elf_header=$(readelf -h "$build/tools/sdpa")
grep -q 'Machine: *AArch64' <<<"$elf_header" ||
    { say "$build/tools/sdpa is not an AArch64 binary"; exit 1; }

t0=$SECONDS
say "=== ctest -L 'unit|tool|examples|abi' under $(qemu-aarch64 --version | head -n 1)"
ctest --test-dir "$build" --output-on-failure -j "$jobs" \
    -L 'unit|tool|examples|abi'
t_test=$((SECONDS - t0))

say "skipped: abi_abidiff (its baseline describes the x86-64 library)"
say "skipped: downstream (an install whose programs run without the" \
    "emulator) and docs (the same text as the x86-64 stages check; the man" \
    "pages' examples run without the emulator)"
say "skipped: mpi (no arm64 MPI installed), python (no arm64 Python and" \
    "NumPy), fuzz (clang's libFuzzer, x86-64 only here)"
say "passed; install ${t_install}s, build ${t_build}s, tests ${t_test}s" \
    "(under qemu-user)"
