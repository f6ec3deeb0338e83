"""A worker whose XLA compiler no longer loads what it compiles ("Failed to materialize
symbols", seen when it ran out of memory mappings) fails every later run too: the run is
made once more in a fresh worker, and its notes say so. The executor below fails that way in
the first worker it runs in (a marker file says which worker ran first)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.execute import (
    ExecutorSpec,
    RunResult,
    get_executor,
    register_executor,
    unregister_executor,
)
from pallaslab.execute.protocol import Prepared

BROKEN = "INTERNAL: Failed to materialize symbols: { (<xla_jit_dylib_3>, { wrapped_add.1 }) }"


class BrokenFirstWorker:
    """`interpret`, except that the first worker process it runs in has a broken JIT."""

    spec = ExecutorSpec(name="broken-first-worker", label="interpret mode",
                        description="interpret, failing as a broken XLA JIT in its first worker")
    name = spec.name
    marker = ""  # a file: absent until a worker has run this executor

    def unavailable(self) -> str | None:
        return None

    def cannot_run(self, prepared: Prepared) -> str | None:
        return None

    def execute(self, prepared: Prepared, deadline: float | None = None) -> RunResult:
        marker = Path(self.marker)
        if not marker.exists():
            marker.write_text(str(os.getpid()))
        if marker.read_text() == str(os.getpid()):
            raise RuntimeError(BROKEN)
        result = get_executor("interpret").execute(prepared, deadline)
        return dataclasses.replace(result, executor=self.name)


@pytest.fixture
def broken(tmp_path):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the worker lacks tests/
    BrokenFirstWorker.marker = str(tmp_path / "first-worker")
    register_executor(BrokenFirstWorker)
    yield
    unregister_executor(BrokenFirstWorker.name)
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_run_in_a_worker_with_a_broken_jit_is_made_again_in_a_fresh_one(broken):
    fn, args = CATALOG["elementwise_1d"].case()
    result = pallaslab.run(fn, *args, executor="broken-first-worker")
    assert result.status == "ran", result.error
    np.testing.assert_array_equal(result.outputs[0], np.asarray(args[0]) * 2.0)
    assert result.notes[-1] == (
        f"re-ran in a fresh worker: the first one's XLA compiler failed (RuntimeError: {BROKEN})")


def test_a_worker_near_the_limit_on_memory_mappings_is_replaced_between_runs(monkeypatch):
    """Every executable XLA compiles holds mappings, and JAX keeps them: a worker past a share
    of `vm.max_map_count` is replaced after its reply (here a limit of 100: after every run)."""
    from pallaslab.execute.worker import isolation
    from pallaslab.util import memory_maps

    fn, args = CATALOG["elementwise_1d"].case()
    assert pallaslab.run(fn, *args, executor="interpret").status == "ran"
    first = isolation.workers_for(None)._worker
    assert first is not None  # well under the machine's own limit: kept
    monkeypatch.setenv(memory_maps.LIMIT_ENV, "100")  # read by this process, per check
    result = pallaslab.run(fn, *args, executor="interpret")
    assert result.status == "ran" and isolation.workers_for(None)._worker is None
    assert not first.alive()
    again = pallaslab.run(fn, *args, executor="interpret")  # a fresh worker
    np.testing.assert_array_equal(again.outputs[0], np.asarray(args[0]) * 2.0)
