# ctest tool_bad_*: `sdpa ARGS...` (ARGS separated by '|') must exit with
# status 2, print nothing on stdout and exactly one line on stderr, which
# matches the regular expression EXPECT.
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${TOOL} ${_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "sdpa ${_args}: expected exit status 2, got '${rc}'")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "sdpa ${_args}: expected nothing on stdout, got: ${out}")
endif()
if(NOT err MATCHES "^[^\n]+\n$")
  message(FATAL_ERROR "sdpa ${_args}: expected one line on stderr, got: ${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "sdpa ${_args}: stderr does not match '${EXPECT}': ${err}")
endif()
message(STATUS "sdpa ${_args}: ${err}")
