# ctest driver of one fuzz target (tests/fuzz/CMakeLists.txt):
#   cmake -DFUZZER=... -DNAME=fuzz_forward -DCORPUS=<seeds> -DWORK=<build dir>
#         -DSECONDS=20 -P run_fuzz.cmake
# Copies the seeds (the files of CORPUS, not its subdirectories: corpus/
# holds fuzz_forward's seeds beside the other targets' directories) to
# WORK/<NAME>-corpus and fuzzes for SECONDS; a crash or failed check fails
# the test and leaves the input in WORK/<NAME>-artifacts/.
foreach(v FUZZER NAME CORPUS WORK SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzz.cmake: -D${v}= is required")
  endif()
endforeach()
set(run ${WORK}/${NAME}-corpus)
file(REMOVE_RECURSE ${run})
file(MAKE_DIRECTORY ${run} ${WORK}/${NAME}-artifacts)
file(GLOB seeds LIST_DIRECTORIES false ${CORPUS}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${run})
endif()
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -rss_limit_mb=2048
          -timeout=20 -print_final_stats=1
          -artifact_prefix=${WORK}/${NAME}-artifacts/ ${run}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} failed (exit ${rc}); the input is in ${WORK}/${NAME}-artifacts/")
endif()
