# The library's source files by folder (src/README.md is the map), included
# by the top-level CMakeLists.txt, which defines the shared and static targets.
set(SDPA_SOURCES
    # core: the context, statuses, versioned structs, the tensor validator
    ${CMAKE_CURRENT_LIST_DIR}/core/context.c
    ${CMAKE_CURRENT_LIST_DIR}/core/status.c
    ${CMAKE_CURRENT_LIST_DIR}/core/struct_size.c
    ${CMAKE_CURRENT_LIST_DIR}/core/tensor_check.c
    # forward: sdpa_forward's validate -> plan -> run
    ${CMAKE_CURRENT_LIST_DIR}/forward/api.c
    ${CMAKE_CURRENT_LIST_DIR}/forward/validate.c
    ${CMAKE_CURRENT_LIST_DIR}/forward/plan.c
    ${CMAKE_CURRENT_LIST_DIR}/forward/live_keys.c
    ${CMAKE_CURRENT_LIST_DIR}/forward/ragged.c
    ${CMAKE_CURRENT_LIST_DIR}/forward/ragged_forward.c
    # paths: the work items a plan runs
    ${CMAKE_CURRENT_LIST_DIR}/paths/path_materialised.c
    ${CMAKE_CURRENT_LIST_DIR}/paths/path_tiled.c
    ${CMAKE_CURRENT_LIST_DIR}/paths/path_decode.c
    ${CMAKE_CURRENT_LIST_DIR}/paths/online_softmax.c
    # kernels: the row kernels and CPU detection (the x86 sets below)
    ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_dispatch.c
    ${CMAKE_CURRENT_LIST_DIR}/kernels/convert.c
    ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_portable.c
    # runtime: workers and the BLAS's threads
    ${CMAKE_CURRENT_LIST_DIR}/runtime/pool.c
    ${CMAKE_CURRENT_LIST_DIR}/runtime/blas_threads.c
    # backward, merge, the layer and positions: validate -> plan -> run each
    ${CMAKE_CURRENT_LIST_DIR}/backward/backward.c
    ${CMAKE_CURRENT_LIST_DIR}/backward/validate.c
    ${CMAKE_CURRENT_LIST_DIR}/backward/plan.c
    ${CMAKE_CURRENT_LIST_DIR}/backward/run.c
    ${CMAKE_CURRENT_LIST_DIR}/backward/ragged.c
    ${CMAKE_CURRENT_LIST_DIR}/merge/merge.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/layer_common.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/layer_half.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/layer.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/layer_backward.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/positions.c
    ${CMAKE_CURRENT_LIST_DIR}/layer/alibi.c
)

# The AVX2+FMA+F16C and AVX-512 row kernels are always built on x86 and
# chosen at run time by CPU detection, so only their own files get the ISA
# flags. F16C converts the half types (the AVX2 set's only source of
# vcvtph2ps). Elsewhere (aarch64) they are not compiled at all: the
# portable set is the only one, and an empty translation unit is an error
# under -Wpedantic -Werror.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64|i[3-6]86")
  list(APPEND SDPA_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx2.c
    ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx512.c)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx2.c
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx512.c
    PROPERTIES COMPILE_OPTIONS
    "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl")
endif()

# The decode kernels' prefetching, for sensitivity runs (docs/PERFORMANCE.md):
# SDPA_PREFETCH_BYTES (CMakeLists.txt) bytes of rows ahead when several
# query rows read a block (0: no such prefetch), SDPA_PREFETCH_HINTS whether the rows
# the caller reads next are prefetched (rows.h).
if(SDPA_PREFETCH_HINTS)
  set(_sdpa_hints 1)
else()
  set(_sdpa_hints 0)
endif()
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx2.c
  ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/kernels/rows_portable.c
  APPEND PROPERTY COMPILE_DEFINITIONS
  SDPA_PREFETCH_BYTES=${SDPA_PREFETCH_BYTES} SDPA_PREFETCH_HINTS=${_sdpa_hints})
