"""Fixtures of the package's tests. The package is imported from PYTHONPATH
(ctest python_pytest sets it to python/ and SDPA_LIBRARY to the library it
built)."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(20261202)
