# sdpa_add_man_tests(): the ctests of one library's section-3 pages
# (docs/man/), label docs. Included by tests/man/CMakeLists.txt for
# libsdpa and by mpi/tests/CMakeLists.txt for libsdpa-mpi.
#
#   PREFIX    test name prefix ("man", "mpi_man")
#   EXPORTS   the export list (tests/abi/exports.txt, mpi/tests/exports.txt)
#   HEADER    the header whose prototypes the pages must show
#   OVERVIEW  the overview page, which must show every prototype too
#   PAGES     the library's pages (files of docs/man/)
#   CPPFLAGS, LIBS, RUN   how an EXAMPLE program is compiled, linked and run
#   ENVIRONMENT, LABELS   added to every example test
#
# Registered: <PREFIX>_pages_exports (check-pages.sh) and one
# <PREFIX>_example_<page> (run-example.sh) per page that is not a .so
# alias. (groff's check of every page is man_pages_lint, in
# tests/man/CMakeLists.txt.)
find_program(SDPA_BASH bash REQUIRED)
set(SDPA_MAN_SCRIPTS ${CMAKE_CURRENT_LIST_DIR})

function(sdpa_add_man_tests)
  cmake_parse_arguments(M "" "PREFIX;EXPORTS;HEADER;OVERVIEW;RUN"
    "PAGES;CPPFLAGS;LIBS;ENVIRONMENT;LABELS" ${ARGN})
  set(_mandir ${PROJECT_SOURCE_DIR}/docs/man)
  add_test(NAME ${M_PREFIX}_pages_exports
    COMMAND ${SDPA_BASH} ${SDPA_MAN_SCRIPTS}/check-pages.sh
            ${M_EXPORTS} ${M_HEADER} ${_mandir} ${M_OVERVIEW})
  set_tests_properties(${M_PREFIX}_pages_exports PROPERTIES
    LABELS "docs;${M_LABELS}")

  # The examples get the project's warning set (they must compile clean
  # under it, with gcc and clang) and the sanitizers of this build
  # (sdpa_outside_build_flags, tests/CMakeLists.txt).
  sdpa_outside_build_flags(_cflags _ldflags)
  list(JOIN M_CPPFLAGS " " _cppflags)
  list(JOIN M_LIBS " " _libs)
  set(_work ${CMAKE_CURRENT_BINARY_DIR}/man-examples)
  foreach(_page IN LISTS M_PAGES)
    file(STRINGS ${_page} _first LIMIT_COUNT 1)
    if(_first MATCHES "^\\.so ")
      continue()
    endif()
    get_filename_component(_name ${_page} NAME_WE)
    set(_test ${M_PREFIX}_example_${_name})
    add_test(NAME ${_test}
      COMMAND ${SDPA_BASH} ${SDPA_MAN_SCRIPTS}/run-example.sh ${_page} ${_work})
    set_tests_properties(${_test} PROPERTIES
      LABELS "docs;${M_LABELS}"
      TIMEOUT 180
      ENVIRONMENT "CC=${CMAKE_C_COMPILER};CFLAGS=${_cflags};CPPFLAGS=${_cppflags};LIBS=${_libs} ${_ldflags};RUN=${M_RUN};${M_ENVIRONMENT}")
  endforeach()
endfunction()
