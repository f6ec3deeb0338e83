"""Loads through a reshaped ref with a strided slice, and masked stores (`pltpu.store`) to a
block with fewer columns than rows or at a constant index: JAX's interpreters stop at each
("'ReshapeTransform' object has no attribute 'indices'", "Out-of-bounds masked swap", "'TypedInt'
object has no attribute 'shape'"), and JAX's shipped ragged paged attention does all three.
pallaslab's executors run their copy of the body with those accesses rewritten
(`pallaslab/model/_jax/ref_views.py`): correct kernels compare ALL CLOSE under both
interpreters, and a wrong stride or a wrong mask is a mismatch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallaslab import compare, step
from pallaslab.cases import load_function
from pallaslab.model._jax.ref_views import HLO_NOTE, TPU_NOTE

PAGES, PAGE, HEADS, LANES = 4, 8, 2, 128  # a page holds PAGE tokens of K and V interleaved


def _pages():
    return jnp.arange(PAGES * PAGE * HEADS * LANES, dtype=jnp.float32).reshape(
        PAGES, PAGE, HEADS, LANES) / 1000.0


def _kv_sum_kernel(kv_ref, o_ref, *, first):
    # Heads interleave K and V, as ragged paged attention stores them: a reshape of the
    # block, then every other row.
    rows = kv_ref.at[:, :, :, :].reshape(PAGES * PAGE * HEADS, LANES)
    o_ref[...] = rows[first::HEADS, :] * 2.0 + rows[1::HEADS, :]


def kv_sum(mutant: str | None = None):
    import functools

    def fn(kv):
        return pl.pallas_call(
            functools.partial(_kv_sum_kernel, first=1 if mutant == "stride" else 0),
            out_shape=jax.ShapeDtypeStruct((PAGES * PAGE, LANES), jnp.float32))(kv)

    def reference(kv):
        return kv[:, :, 0, :].reshape(-1, LANES) * 2.0 + kv[:, :, 1, :].reshape(-1, LANES)

    return fn, (_pages(),), reference


def _masked_rows_kernel(x_ref, o_ref, *, limit):
    o_ref[...] = jnp.zeros_like(o_ref)
    rows = lax.broadcasted_iota(jnp.int32, (PAGE, 2, LANES), 0)
    # A block of PAGE rows and 2 columns of heads, at the constant page 1.
    pltpu.store(o_ref.at[1, :, pl.ds(0, 2), :], x_ref[1] + 1.0, mask=rows < limit)


def masked_rows(mutant: str | None = None):
    import functools

    def fn(x):
        return pl.pallas_call(
            functools.partial(_masked_rows_kernel, limit=6 if mutant == "mask" else 5),
            out_shape=jax.ShapeDtypeStruct((PAGES, PAGE, 4, LANES), jnp.float32))(x)

    def reference(x):
        return jnp.zeros((PAGES, PAGE, 4, LANES), jnp.float32).at[1, :5, :2].set(
            x[1, :5] + 1.0)

    return fn, (_pages(),), reference


CASES = {"kv_sum": kv_sum, "masked_rows": masked_rows}
MUTANTS = {"kv_sum": "stride", "masked_rows": "mask"}
INTERPRETERS = ("interpret", "tpu-interpret")


@pytest.mark.parametrize("executor", INTERPRETERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_correct_kernel_compares_all_close_under_each_interpreter(name, executor):
    fn, args, reference = CASES[name]()
    result = compare(fn, *args, executors=executor, reference=reference, timeout=300)
    assert result.passed and result.complete, result.statuses
    notes = result.result(executor).notes
    assert (TPU_NOTE if executor == "tpu-interpret" else HLO_NOTE) in notes or \
        (name == "kv_sum" and executor == "interpret")  # the HLO interpreter needs no rewrite


@pytest.mark.parametrize("executor", INTERPRETERS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_wrong_stride_or_mask_is_a_mismatch(name, executor):
    fn, args, reference = CASES[name](MUTANTS[name])
    result = compare(fn, *args, executors=executor, reference=reference, timeout=300)
    assert result.complete and not result.passed
    assert result.statuses[executor].status == "ran"


def test_ragged_paged_attention_compares_all_close_by_default_and_against_its_reference():
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa

    fn, args = load_function("tests/cases/shipped.py:tpu_ragged_paged_attention")()
    by_default = compare(fn, *args, timeout=600)
    assert by_default.passed and by_default.complete
    assert "tpu-interpret" in by_default.executors
    against = compare(fn, *args, executors="interpret,tpu-interpret",
                      reference=rpa.ref_ragged_paged_attention, timeout=600)
    assert against.passed and against.complete, against.statuses
    assert TPU_NOTE in against.result("tpu-interpret").notes
    assert HLO_NOTE in against.result("interpret").notes


def test_the_masked_store_steps_to_the_rows_its_mask_holds():
    fn, args, _ = masked_rows()
    st = step(fn, *args)
    st.step(st.programs)
    out = np.asarray(st.outputs()[0])
    x = np.asarray(args[0])
    np.testing.assert_allclose(out[1, :5, :2], x[1, :5] + 1.0)
    assert not out[1, 5:].any() and not out[0].any()
