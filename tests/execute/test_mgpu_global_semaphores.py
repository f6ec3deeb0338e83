"""Global semaphores (`pl.get_global`) in Mosaic GPU kernels: JAX's Mosaic GPU interpreter has
none, so gpu-interpret runs them by pallaslab's rule (a count per launch shared by all blocks),
says so in its notes, and neither passes a wrong kernel nor blames a correct one it cannot run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture

ONES = jnp.ones((128,), jnp.float32)


def _kernel(body, grid=(4,)):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32), grid=grid,
                        grid_names=("x",))


def _handoff(signaller, waiter, *, signals=1):
    """Block `signaller` signals a global semaphore `signals` times; block `waiter` waits on
    it, then writes 1 + the count left (a correct hand-off leaves 0)."""

    def body(o_ref):
        sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
        block = lax.axis_index("x")

        @pl.when(block == signaller)
        def _():
            for _ in range(signals):
                pl.semaphore_signal(sem)

        @pl.when(block == waiter)
        def _():
            pl.semaphore_wait(sem)
            o_ref[...] = jnp.full(o_ref.shape, 1.0) + pl.semaphore_read(sem).astype(jnp.float32)

    return _kernel(body)


def _gpu(cmp):
    (gpu,) = [r for r in cmp.results if r.executor == "gpu-interpret"]
    return gpu


def test_a_signal_then_wait_between_blocks_runs_by_pallaslabs_rule_and_says_so():
    cmp = pallaslab.compare(_handoff(0, 1), reference=lambda: ONES)
    assert cmp.executors == ("gpu-interpret", "reference") and cmp.passed
    gpu = _gpu(cmp)
    assert gpu.status == "ran"
    assert any(n.startswith("global semaphores (pl.get_global) counted by pallaslab's rule")
               for n in gpu.notes)


def test_a_count_left_over_is_a_mismatch():
    """Signalled twice, waited once: the count read after the wait is 1, not 0."""
    cmp = pallaslab.compare(_handoff(0, 1, signals=2), reference=lambda: ONES)
    assert cmp.outcome == "mismatch" and _gpu(cmp).status == "ran"


def test_a_wait_for_a_later_blocks_signal_is_incomplete_not_a_verdict():
    """Block 0 waits for block 3: the interpreter runs blocks in grid order, so it cannot run
    the kernel; the comparison says so and names the wait's line."""
    cmp = pallaslab.compare(_handoff(3, 0), reference=lambda: ONES)
    assert cmp.outcome == "incomplete" and not cmp.passed
    gpu = _gpu(cmp)
    assert gpu.status == "unavailable", gpu.error
    assert "waits for a count of 1 on a global semaphore that stays at 0" in gpu.unavailable
    assert "test_mgpu_global_semaphores.py:" in gpu.unavailable
    assert "grid order" in gpu.unavailable


def _indexed(signalled):
    """A global array of two semaphores: block 0 signals element `signalled`, block 1 waits
    on element 1."""

    def body(o_ref):
        sems = pl.get_global(plgpu.SemaphoreType.REGULAR((2,)))
        block = lax.axis_index("x")

        @pl.when(block == 0)
        def _():
            pl.semaphore_signal(sems.at[signalled])

        @pl.when(block == 1)
        def _():
            pl.semaphore_wait(sems.at[1])
            o_ref[...] = jnp.ones_like(o_ref)

    return _kernel(body)


@pytest.mark.parametrize("signalled, outcome", [(1, "pass"), (0, "incomplete")])
def test_an_element_of_a_semaphore_array_is_its_own_count(signalled, outcome):
    cmp = pallaslab.compare(_indexed(signalled), reference=lambda: ONES)
    assert cmp.outcome == outcome and cmp.passed == (outcome == "pass")


def test_blocks_step_in_order_sharing_the_launchs_semaphores_and_step_back_with_them():
    st = pallaslab.step(_handoff(0, 1))
    assert st.programs == 4
    assert st.step() == (0,)  # signals
    assert np.isnan(st.outputs()[0]).all()
    assert st.step() == (1,)  # waits on block 0's signal, then writes
    np.testing.assert_allclose(st.outputs()[0], np.asarray(ONES))
    st.back(1)  # the semaphore's count goes back with the block: block 1 waits again
    assert st.step() == (1,)
    np.testing.assert_allclose(st.outputs()[0], np.asarray(ONES))
    st.reset()
    assert st.step(2) == (1,)
    np.testing.assert_allclose(st.outputs()[0], np.asarray(ONES))


def test_check_names_a_wait_on_a_global_semaphore_nothing_signals():
    def body(o_ref):
        sem = pl.get_global(plgpu.SemaphoreType.REGULAR)

        @pl.when(lax.axis_index("x") == 1)
        def _():
            pl.semaphore_wait(sem)
            o_ref[...] = jnp.ones_like(o_ref)

    (insp,) = inspect_capture(pallaslab.capture(_kernel(body)))
    (error,) = [f for f in insp.findings if f.severity == "error"]
    assert error.code == "unsignalled-wait"
    assert error.message.startswith("body: the semaphore wait at test_mgpu_global_semaphores.py:")
    assert "waits on global semaphore at test_mgpu_global_semaphores.py:" in error.message
    assert "nothing in the kernel signals" in error.message
    (fine,) = inspect_capture(pallaslab.capture(_handoff(0, 1)))
    assert not [f for f in fine.findings if f.severity == "error"]
