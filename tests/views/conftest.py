"""Fixtures the Compare view's test files share."""

import numpy as np
import pytest
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.views.compare import compare_workbench


@pytest.fixture(scope="module")
def wrong():
    """The deliberately wrong catalog kernel, compared against its reference."""
    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = pallaslab.inspect(fn, *args)
    view = compare_workbench(wb, executors=("interpret", "reference"),
                             reference=shifted_block_reference)
    return wb, view, np.asarray(args[0])
