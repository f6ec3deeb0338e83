"""Run verdicts of issue 24 (capture and the TPU/GPU interpreters), on the kernels of
`kernels_run_verdicts.py`."""

from __future__ import annotations

import kernels_run_verdicts as K
import numpy as np
import pytest

import pallaslab
from pallaslab.analysis.inspection import inspect_kernel

ASYNC_COPIES = ["async_copy_local", "async_copy_prefetch", "async_copy_remote"]


def _capture(name: str):
    fn, args = getattr(K, name)()
    return pallaslab.capture(fn, *args)


@pytest.mark.parametrize("name", ASYNC_COPIES)
def test_semaphores_between_kernels_are_semaphores_not_arrays(name):
    """A DMA started in one kernel and waited in the next: its semaphore is an output, then an
    input. Capture used to fail ("Cannot interpret 'dma_sem' as a data type")."""
    kernels = list(_capture(name))
    sems = [op for k in kernels for op in k.operands if op.memory_space == "semaphore_mem"]
    assert sems, f"{name}: no semaphore operand captured"
    for op in sems:
        assert op.is_semaphore and op.element == "dma_sem", op
        assert op.block_dims is None and not op.windowed, op  # not pipelined, no bytes moved
    assert {op.role for op in sems} == {"input", "output"}


@pytest.mark.parametrize("name", ASYNC_COPIES)
def test_semaphores_between_kernels_are_not_blocks(name):
    """No block rule applies to a semaphore operand: it was a false `tpu-block-shape` error
    ("a rank-0 (scalar) int32 block in semaphore_mem memory")."""
    for kernel in _capture(name):
        found = inspect_kernel(kernel, backend="tpu").findings
        assert not [f.message for f in found if f.severity == "error"], kernel.name


def test_the_dma_names_its_semaphore_output():
    start = next(iter(_capture("async_copy_local")))
    (dma,) = start.dmas
    assert (dma.src, dma.dst, dma.semaphore) == ("args[0]", "outputs[1]", "outputs[2]")


@pytest.mark.parametrize("name", ["async_copy_local", "async_copy_prefetch"])
def test_tpu_interpret_says_it_cannot_run_a_semaphore_passed_between_kernels(name):
    """JAX's TPU interpreter fails on this pattern (nan + dma_sem): it is unavailable with the
    reason, never failed or crashed; `interpret` runs the pair in program order
    (tests/execute/test_cross_call_semaphores.py)."""
    fn, args = getattr(K, name)()
    cmp = pallaslab.compare(fn, *args, executors="tpu-interpret,interpret")
    status = cmp.statuses["tpu-interpret"]
    assert status.status == "unavailable", status
    assert "DMA semaphore passed between pallas_calls (outputs[2] (sem) of kernel" in \
        status.reason and "waited in kernel" in status.reason
    assert "judge it statically" in status.reason
    assert cmp.statuses["interpret"].status == "ran", cmp.statuses["interpret"]


def test_the_kernel_waiting_on_a_semaphore_passed_between_kernels_steps_and_says_how():
    fn, args = K.async_copy_local()
    st = pallaslab.step(fn, *args, kernel=1)
    st.step(st.programs)
    np.testing.assert_array_equal(st.outputs()[0], np.asarray(args[0]))  # the copy landed
    assert any("a DMA semaphore passes between pallas_calls" in n for n in st.notes)


def test_racing_cores_of_a_mesh_kernel_are_named():
    fn, args = K.core_map_race()
    result = pallaslab.run(fn, *args, executor="tpu-interpret")
    (race,) = [f for f in result.findings if f.code == "data-race"]
    assert "between core 0 and core 1" in race.message, race.message
    assert "async copy of core 0" in race.message and "of core 1" in race.message
    assert race.operand == "outputs (o_hbm)" and race.programs == ((0,), (1,))
    assert "kernels_run_verdicts.py:147" in race.message
