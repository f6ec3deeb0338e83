"""A run that would hold more than the memory budget is refused before its inputs are made
(pallaslab/execute/prepared.py `check_memory`): a 2^31-element float32 operand used to abort
the process inside XLA. Nothing here allocates more than a few bytes: every refusal comes
first."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

from pallaslab import settings
from pallaslab.errors import MemoryBudgetError
from pallaslab.execute import compare, run
from pallaslab.execute.prepared import check_memory

HUGE = 2**31  # elements: f32[2^31] is 8 GiB
BLOCK = 2**20
GiB = 2**30


@pytest.fixture(autouse=True)
def sixteen_gib_available(monkeypatch):
    monkeypatch.delenv(settings.MEMORY_BUDGET, raising=False)
    monkeypatch.setattr(settings, "available_memory", lambda: 16 * GiB)


def _add_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def add_one(x):
    return pl.pallas_call(_add_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // BLOCK,),
                          in_specs=[pl.BlockSpec((BLOCK,), lambda i: (i,))],
                          out_specs=pl.BlockSpec((BLOCK,), lambda i: (i,)),
                          interpret=True)(x)


def _fill_kernel(x_ref, o_ref):
    o_ref[...] = jnp.broadcast_to(x_ref[0], o_ref.shape)


def fill_huge(x):
    """A tiny input, an 8 GiB output: only the capture knows the output's size."""
    return pl.pallas_call(_fill_kernel, out_shape=jax.ShapeDtypeStruct((HUGE,), x.dtype),
                          grid=(HUGE // BLOCK,),
                          in_specs=[pl.BlockSpec((8,), lambda i: (0,))],
                          out_specs=pl.BlockSpec((BLOCK,), lambda i: (i,)),
                          interpret=True)(x)


def test_a_huge_abstract_operand_is_refused_before_it_is_made():
    with pytest.raises(MemoryBudgetError) as err:
        run(add_one, jax.ShapeDtypeStruct((HUGE,), jnp.float32))
    assert str(err.value) == (
        "args[0] (f32[2147483648], 8.00 GiB): the run would hold 16.00 GiB (inputs 8.00 GiB, "
        "outputs 0 B, the executor's copies 8.00 GiB), over the budget of 8.00 GiB (50% of the "
        "16.00 GiB available; PALLASLAB_MEMORY_BUDGET=0.5 by default); refused before the run. "
        "Use smaller arrays, or set PALLASLAB_MEMORY_BUDGET to a number of bytes or a "
        "fraction of the memory available")


def test_compare_refuses_too(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_BUDGET, "1000000")
    with pytest.raises(MemoryBudgetError, match=r"^kwargs\['x'\] \(bf16\[1024,1024\], "
                                                r"2.00 MiB\): .* over the budget of 976.56 KiB "
                                                r"\(PALLASLAB_MEMORY_BUDGET=1000000\)"):
        compare(lambda *, x: add_one(x.reshape(-1)),
                x=jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16))


def test_a_huge_output_is_refused_before_anything_runs():
    with pytest.raises(MemoryBudgetError) as err:
        run(fill_huge, jnp.zeros((8,), jnp.float32))
    assert str(err.value).startswith(
        "outputs[0] (f32[2147483648], 8.00 GiB): the run would hold 16.00 GiB (inputs 32 B, "
        "outputs 8.00 GiB, the executor's copies 8.00 GiB), over the budget of 8.00 GiB")


def test_a_run_within_the_budget_runs(monkeypatch):
    monkeypatch.setenv(settings.MEMORY_BUDGET, str(4 * 4 * BLOCK))  # exactly 2 x (in + out)
    result = run(add_one, jax.ShapeDtypeStruct((BLOCK,), jnp.float32), executor="interpret")
    assert result.error is None and result.outputs is not None
    with pytest.raises(MemoryBudgetError, match=r"^outputs\[0\] \(f32\[1048577\], 4.00 MiB\)"):
        check_memory((jnp.zeros((BLOCK,), jnp.float32),), {},
                     [jax.ShapeDtypeStruct((BLOCK + 1,), jnp.float32)])
