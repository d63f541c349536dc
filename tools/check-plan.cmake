# ctest tool_plan: `sdpa plan` for one head of T = 131072 tokens, d = 64,
# float32: the materialised T x T matrix is exactly 64 GiB (68719476736
# bytes) and the flops 2 * T^2 * 128; libsdpa takes the tiled path and
# holds a few MiB at most (0.6 MiB with OpenBLAS at one thread, 34 KiB of
# smaller tiles with more: the bound is 16 MiB either way).
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${TOOL} plan --n 1 --hq 1 --hkv 1 --tq 131072
                        --tk 131072 --dk 64 --dv 64 --dtype f32
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sdpa plan: exit status ${rc}: ${err}")
endif()
message(STATUS "sdpa plan:\n${out}")
if(NOT out MATCHES "\nscores T x T +68719476736 bytes +\\(64 GiB")
  message(FATAL_ERROR "expected 68719476736 bytes (64 GiB) of scores")
endif()
if(NOT out MATCHES "\nflops +4398046511104 ")
  message(FATAL_ERROR "expected 4398046511104 flops")
endif()
if(NOT out MATCHES "\nlibsdpa scratch +([0-9]+) bytes .*tiled path: AUTO's choice")
  message(FATAL_ERROR "expected the tiled path as AUTO's choice")
endif()
set(scratch ${CMAKE_MATCH_1})
if(scratch EQUAL 0 OR scratch GREATER 16777216)
  message(FATAL_ERROR "libsdpa's scratch is ${scratch} bytes, not a few MiB")
endif()
if(NOT out MATCHES "\n  tiled +${scratch} bytes .*<- AUTO")
  message(FATAL_ERROR "the forced tiled path should hold AUTO's ${scratch} bytes")
endif()
