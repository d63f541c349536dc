# ctest tool_plan: `sdpa plan` for one head of T = 131072 tokens, d = 64,
# float32: the materialised T x T matrix is exactly 64 GiB (68719476736
# bytes) and the flops 2 * T^2 * 128; libsdpa takes the tiled path and
# holds a few MiB at most (0.6 MiB with OpenBLAS at one thread, 34 KiB of
# smaller tiles with more: the bound is 16 MiB either way). Then a ragged
# call (below).
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

# A ragged call (--q-lens): a serving step of 3 decoding sequences and a
# 512-row prefill chunk over a paged cache, 2 threads. Each sequence is
# planned as its own call: decode for one query row per KV head group,
# tiled for the chunk; the flops are each sequence's allowed scores
# (decodes: 2 * 32 * L * 256; the chunk, bottom-right over 1024 keys:
# rows i see i + 513 keys, 393472 scores a head). The whole call's scratch
# is one per-worker buffer (the largest sequence's) for each of the 2
# workers, the decode sequences' partials (each from a 64-byte line) and
# one record per sequence.
execute_process(COMMAND ${TOOL} plan --q-lens 3x1,512
                        --kv-lens 4096,2048,100,1024 --hq 32 --hkv 8 --dk 128
                        --causal bottom-right --keys paged --threads 2
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sdpa plan --q-lens: exit status ${rc}: ${err}")
endif()
message(STATUS "sdpa plan --q-lens:\n${out}")
set(_num "([0-9]+)")
set(_items 0)
set(_largest 0)
set(_partials 0)
foreach(_seq 0 1 2 3)
  if(_seq EQUAL 3)
    set(_path tiled)
  else()
    set(_path decode)
  endif()
  if(NOT out MATCHES "\n +${_seq} +${_num} +4096 +${_num} +${_path} +${_num} +${_num} +${_num} ")
    message(FATAL_ERROR "sequence ${_seq}: no line with Tk 4096 and the ${_path} path")
  endif()
  math(EXPR _items "${_items} + ${CMAKE_MATCH_3}")
  if(CMAKE_MATCH_4 GREATER _largest)
    set(_largest ${CMAKE_MATCH_4})
  endif()
  math(EXPR _partials "${_partials} + (${CMAKE_MATCH_5} + 63) / 64 * 64")
endforeach()
if(NOT out MATCHES "\nflops +6548946944 ")
  message(FATAL_ERROR "expected 6548946944 flops (each sequence's allowed scores)")
endif()
if(NOT out MATCHES "\nwork items +${_items} in the parallel phase .*then 24 merge items")
  message(FATAL_ERROR "expected ${_items} items (the sequences' sum), then 24 merges")
endif()
if(NOT out MATCHES "\nlibsdpa scratch +${_num} bytes")
  message(FATAL_ERROR "no total scratch")
endif()
set(_total ${CMAKE_MATCH_1})
if(NOT out MATCHES "\n  per worker +${_largest} bytes x 2 workers")
  message(FATAL_ERROR "expected ${_largest} bytes (the largest sequence's) for 2 workers")
endif()
if(NOT out MATCHES "\n  partials +${_partials} bytes")
  message(FATAL_ERROR "expected ${_partials} bytes of partials (their sum)")
endif()
if(NOT out MATCHES "\n  records +${_num} bytes +\\(4 sequences, ${_num} each\\)")
  message(FATAL_ERROR "no records line")
endif()
set(_records ${CMAKE_MATCH_1})
math(EXPR _each "${_records} / 4")
math(EXPR _whole "${_each} * 4")
math(EXPR _sum "2 * ${_largest} + ${_partials} + ${_records}")
if(_each EQUAL 0 OR NOT _whole EQUAL _records OR NOT _each EQUAL CMAKE_MATCH_2
   OR NOT _sum EQUAL _total)
  message(FATAL_ERROR "the scratch ${_total} is not 2 x ${_largest} + ${_partials} + 4 records of ${CMAKE_MATCH_2}")
endif()

# The keys a row sees, and the warning for one row against a cache anchored
# top-left (PyTorch's is_causal=True): key 0 only.
execute_process(COMMAND ${TOOL} plan --tq 1 --tk 4096 --dk 128 --hq 32
                        --hkv 8 --causal top-left
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "sdpa plan top-left: exit status ${rc}: ${err}")
endif()
if(NOT out MATCHES "\nkeys seen +query row 0: keys 0\\.\\.0\n +top-left with Tq < Tk: query row 0 sees key 0 only")
  message(FATAL_ERROR "expected key 0 only and the top-left warning:\n${out}")
endif()
execute_process(COMMAND ${TOOL} plan --tq 4 --tk 100 --dk 64
                        --causal bottom-right
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT out MATCHES "\nkeys seen +query row 0: keys 0\\.\\.96; query row 3: keys 0\\.\\.99\n")
  message(FATAL_ERROR "expected rows 0 and 3 to see keys 0..96 and 0..99:\n${out}")
endif()
if(out MATCHES "top-left with")
  message(FATAL_ERROR "no warning expected for bottom-right:\n${out}")
endif()
