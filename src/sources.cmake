# The library's source files, owned by the core (src/). Included by the
# top-level CMakeLists.txt, which defines the shared and static targets.
set(SDPA_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/api.c
    ${CMAKE_CURRENT_LIST_DIR}/status.c
    ${CMAKE_CURRENT_LIST_DIR}/context.c
    ${CMAKE_CURRENT_LIST_DIR}/struct_size.c
    ${CMAKE_CURRENT_LIST_DIR}/validate.c
    ${CMAKE_CURRENT_LIST_DIR}/plan.c
    ${CMAKE_CURRENT_LIST_DIR}/path_materialised.c
    ${CMAKE_CURRENT_LIST_DIR}/path_tiled.c
    ${CMAKE_CURRENT_LIST_DIR}/path_decode.c
    ${CMAKE_CURRENT_LIST_DIR}/online_softmax.c
    ${CMAKE_CURRENT_LIST_DIR}/backward.c
    ${CMAKE_CURRENT_LIST_DIR}/merge.c
    ${CMAKE_CURRENT_LIST_DIR}/live_keys.c
    ${CMAKE_CURRENT_LIST_DIR}/alibi.c
    ${CMAKE_CURRENT_LIST_DIR}/positions.c
    ${CMAKE_CURRENT_LIST_DIR}/layer_common.c
    ${CMAKE_CURRENT_LIST_DIR}/layer.c
    ${CMAKE_CURRENT_LIST_DIR}/layer_backward.c
    ${CMAKE_CURRENT_LIST_DIR}/pool.c
    ${CMAKE_CURRENT_LIST_DIR}/blas_threads.c
    ${CMAKE_CURRENT_LIST_DIR}/rows_dispatch.c
    ${CMAKE_CURRENT_LIST_DIR}/rows_portable.c
    ${CMAKE_CURRENT_LIST_DIR}/rows_avx2.c
    ${CMAKE_CURRENT_LIST_DIR}/rows_avx512.c
)

# The AVX2+FMA+F16C and AVX-512 row kernels are always built and chosen at
# run time by CPU detection, so only their own files get the ISA flags.
# F16C converts the half types (the AVX2 set's only source of vcvtph2ps).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64|i[3-6]86")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/rows_avx2.c
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/rows_avx512.c
    PROPERTIES COMPILE_OPTIONS
    "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl")
endif()
