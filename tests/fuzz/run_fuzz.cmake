# ctest driver of fuzz_forward (tests/fuzz/CMakeLists.txt):
#   cmake -DFUZZER=... -DCORPUS=<seeds> -DWORK=<build dir> -DSECONDS=45 -P run_fuzz.cmake
# Copies the seeds to WORK/corpus-run (the fuzzer adds its finds there) and
# fuzzes for SECONDS; a crash or failed check fails the test and leaves the
# input in WORK/fuzz-artifacts/.
foreach(v FUZZER CORPUS WORK SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzz.cmake: -D${v}= is required")
  endif()
endforeach()
set(run ${WORK}/corpus-run)
file(REMOVE_RECURSE ${run})
file(MAKE_DIRECTORY ${run} ${WORK}/fuzz-artifacts)
file(GLOB seeds ${CORPUS}/*)
file(COPY ${seeds} DESTINATION ${run})
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -rss_limit_mb=2048
          -timeout=20 -print_final_stats=1
          -artifact_prefix=${WORK}/fuzz-artifacts/ ${run}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz_forward failed (exit ${rc}); the input is in ${WORK}/fuzz-artifacts/")
endif()
