# ctest docs_*_example: the C block of the manual page PAGE between the
# lines <!-- MARK --> and <!-- /MARK --> is, byte for byte, the part of
# the program SOURCE between the lines /* MARK */ and /* /MARK */, which
# that program's own ctest compiles and runs: the code users read is the
# code that is tested.
#
#   cmake -DPAGE=docs/RAGGED.md -DSOURCE=examples/serving_step.c
#         -DMARK=ragged-step -P check-excerpt.cmake
cmake_minimum_required(VERSION 3.25)
file(READ ${PAGE} _page)
file(READ ${SOURCE} _source)
string(FIND "${_page}" "<!-- ${MARK} -->\n```c\n" _begin)
string(FIND "${_page}" "```\n<!-- /${MARK} -->" _end)
string(FIND "${_source}" "/* ${MARK} */\n" _src_begin)
string(FIND "${_source}" "/* /${MARK} */\n" _src_end)
if(_begin LESS 0 OR _end LESS _begin)
  message(FATAL_ERROR "${PAGE}: no block between <!-- ${MARK} --> and <!-- /${MARK} -->")
endif()
if(_src_begin LESS 0 OR _src_end LESS _src_begin)
  message(FATAL_ERROR "${SOURCE}: no part between /* ${MARK} */ and /* /${MARK} */")
endif()
string(LENGTH "<!-- ${MARK} -->\n```c\n" _skip)
math(EXPR _begin "${_begin} + ${_skip}")
math(EXPR _len "${_end} - ${_begin}")
string(SUBSTRING "${_page}" ${_begin} ${_len} _block)
string(LENGTH "/* ${MARK} */\n" _skip)
math(EXPR _src_begin "${_src_begin} + ${_skip}")
math(EXPR _len "${_src_end} - ${_src_begin}")
string(SUBSTRING "${_source}" ${_src_begin} ${_len} _part)
if(NOT _block STREQUAL _part)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${MARK}.page.c "${_block}")
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${MARK}.source.c "${_part}")
  message(FATAL_ERROR "${PAGE}'s ${MARK} block differs from ${SOURCE}: "
    "diff ${CMAKE_CURRENT_BINARY_DIR}/${MARK}.page.c ${MARK}.source.c")
endif()
string(LENGTH "${_block}" _n)
message(STATUS "${PAGE}'s ${MARK} block is ${SOURCE}'s (${_n} bytes)")
