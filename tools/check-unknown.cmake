# ctest tool_unknown_subcommand: `sdpa no-such-command` must exit with 2,
# print the usage on stderr and nothing on stdout.
execute_process(COMMAND ${TOOL} no-such-command
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit status 2, got '${rc}'")
endif()
if(NOT err MATCHES "usage: sdpa")
  message(FATAL_ERROR "expected the usage on stderr, got: ${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got: ${out}")
endif()
