"""A kernel's call made once and closed over travels to the executor worker with JAX's own
sentinels intact (found by the fuzzer: tests/fuzz/found/triton_call_made_outside_fn.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import pallaslab

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz" / "found"))
import triton_call_made_outside_fn as found


def test_a_pallas_call_without_in_specs_made_outside_the_function_runs_in_the_worker():
    fn, args = found.case()
    result = pallaslab.compare(fn, *args, executors=("interpret", "vectorized"),
                               reference=lambda x, y: x + y)
    assert {name: s.status for name, s in result.statuses.items()} == \
        {"interpret": "ran", "vectorized": "ran", "reference": "ran"}, result.statuses
    assert result.complete and result.allclose
    np.testing.assert_array_equal(np.asarray(result.results[0].outputs[0]), 2.0)
