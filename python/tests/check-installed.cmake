# ctest python_installed: `cmake --install` to a fresh prefix, then, with
# neither SDPA_LIBRARY nor the sources on the path, `import sdpa` from the
# installed package must load the installed library (through the path the
# install wrote into sdpa/_install.py) and compute the two-token example.
# -DBUILD= build dir, -DPREFIX= prefix, -DPYTHON= interpreter,
# -DPYDIR= the package's directory (relative to PREFIX, or absolute).
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD}" --prefix "${PREFIX}"
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
if(NOT IS_ABSOLUTE "${PYDIR}")
  set(PYDIR "${PREFIX}/${PYDIR}")
endif()
set(ENV{PYTHONPATH} "${PYDIR}")
unset(ENV{SDPA_LIBRARY})
execute_process(
  COMMAND "${PYTHON}" -c [=[
import os, sys
import numpy as np
import sdpa
here = os.path.realpath(sdpa.__file__)
assert here.startswith(os.path.realpath(sys.argv[1])), here
assert sdpa.library_found_by == "installed by CMake", sdpa.library_found_by
assert os.path.realpath(sdpa.library_path).startswith(os.path.realpath(sys.argv[2])), sdpa.library_path
out = sdpa.attention([[1, 0], [0, 1]], [[1, 1], [2, 0]], [[1, 0, 0], [0, 1, 0]], causal=True)
assert np.allclose(out, [[1, 0, 0], [0.6698, 0.3302, 0]], atol=1e-4), out
print("installed sdpa at", here, "loads", sdpa.library_path)
]=] "${PYDIR}" "${PREFIX}"
  WORKING_DIRECTORY "${PREFIX}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed package failed: ${rc}")
endif()
