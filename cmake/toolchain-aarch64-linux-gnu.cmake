# Cross-compiling libsdpa for aarch64 Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu) against the arm64 libraries of a multiarch
# install (libopenblas-dev:arm64, libcmocka-dev:arm64, libc6-dev:arm64 in
# /usr/lib/aarch64-linux-gnu), the tests run under qemu-user. .ci/aarch64.sh
# uses it:
#
#   cmake -S . -B build-aarch64 \
#       -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
#
# SDPA_AARCH64_EMULATOR overrides the emulator (default qemu-aarch64 found
# on PATH; empty: none, e.g. on an aarch64 machine or with binfmt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(SDPA_CROSS_TRIPLET aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${SDPA_CROSS_TRIPLET}-gcc)
# The multiarch libraries sit on the host's own paths; only the cross
# compiler's programs and pkg-config's search must be pointed at them.
set(CMAKE_LIBRARY_ARCHITECTURE ${SDPA_CROSS_TRIPLET})

# pkg-config (the only way the build finds its dependencies) reads the
# arm64 .pc files only, never the host's.
set(ENV{PKG_CONFIG_LIBDIR}
  "/usr/lib/${SDPA_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Programs (bash, nm, groff, python) are the host's; libraries and
# headers the target's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# The test binaries run through qemu-user without binfmt: ctest prepends
# the emulator to each test whose command is one of our executables. The
# arm64 dynamic loader and libraries of the multiarch install are on the
# host's paths, where qemu finds them without -L.
if(NOT DEFINED SDPA_AARCH64_EMULATOR)
  find_program(SDPA_AARCH64_EMULATOR NAMES qemu-aarch64 qemu-aarch64-static)
endif()
if(SDPA_AARCH64_EMULATOR)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SDPA_AARCH64_EMULATOR})
endif()
