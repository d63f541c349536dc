# Included by the top-level CMakeLists.txt (inside if(SDPA_BUILD_TESTS)):
# is clang's libFuzzer runtime there? Sets
#   SDPA_FUZZ_ENABLED     ON when tests/fuzz is built and run by ctest
#   SDPA_FUZZ_LIB_FLAGS   compile flags of the instrumented library variant
#   SDPA_FUZZ_FLAGS       compile and link flags of the fuzz targets
# The flags combine with SDPA_SANITIZE (e.g. address,undefined in CI): the
# sanitizers are named again, which clang accepts.
option(SDPA_BUILD_FUZZ "Build the libFuzzer targets tests/fuzz when the compiler has the runtime" ON)
option(SDPA_FUZZ_STRICT "Fuzz targets: fail on the open findings they tolerate (README.md there)" OFF)

set(SDPA_FUZZ_ENABLED OFF)
set(SDPA_FUZZ_LIB_FLAGS "")
set(SDPA_FUZZ_FLAGS "")
# ThreadSanitizer and MemorySanitizer do not combine with the fuzzer's
# AddressSanitizer: such builds skip the fuzzer (a STATUS line says so).
if(SDPA_BUILD_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang"
   AND NOT SDPA_SANITIZE MATCHES "thread|memory")
  include(CheckCSourceCompiles)
  include(CMakePushCheckState)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
  set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address,undefined")
  set(CMAKE_REQUIRED_QUIET ON)
  # libFuzzer provides main(); the check links a complete fuzz target.
  check_c_source_compiles("
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return size > 0 && data[0] == 0;
}" SDPA_HAVE_LIBFUZZER)
  cmake_pop_check_state()
  if(SDPA_HAVE_LIBFUZZER)
    set(SDPA_FUZZ_ENABLED ON)
    set(_sdpa_fuzz_common -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
    set(SDPA_FUZZ_LIB_FLAGS -fsanitize=fuzzer-no-link,address,undefined ${_sdpa_fuzz_common})
    set(SDPA_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined ${_sdpa_fuzz_common})
  endif()
endif()
if(SDPA_FUZZ_ENABLED)
  message(STATUS "libsdpa: libFuzzer runtime found: building tests/fuzz (fuzz_* targets, ctest label fuzz)")
elseif(NOT SDPA_BUILD_FUZZ)
  message(STATUS "libsdpa: SDPA_BUILD_FUZZ is OFF: tests/fuzz is not built")
elseif(SDPA_SANITIZE MATCHES "thread|memory")
  message(STATUS "libsdpa: SDPA_SANITIZE=${SDPA_SANITIZE} does not combine with the fuzzer's AddressSanitizer: tests/fuzz is not built")
else()
  message(STATUS "libsdpa: no libFuzzer runtime (-fsanitize=fuzzer) with ${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}: tests/fuzz is not built or registered (use clang with libclang-rt-dev)")
endif()
