"""Whose limit is it: where pallaslab's own executor breaks, the interpreter runs the kernel
(the reason in `fallback`); where JAX's interpreter cannot run a kernel, the executor is
unavailable with that reason, never a bare Python error; and a default comparison never
pairs an executor that refuses the kernel."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plt

from pallaslab import compare, run
from pallaslab.cases import load_function
from pallaslab.execute.executors import vectorized
from pallaslab.execute.prepared import prepare
from pallaslab.model._jax.trace import abstract_tpu


def test_a_pallas_call_closing_over_refs_runs_interpreted_and_matches():
    fn, args = load_function("tests/peer/tpu_state.py:stateful_kernel_on_refs")()
    result = compare(fn, *args, reference=lambda x: x)
    assert result.executors == ("vectorized", "reference")
    assert result.complete and result.passed
    vec = result.results[0]
    assert vec.status == "ran" and vec.ran_under == "interpret"
    assert vec.fallback == ("_copy_captured: the body closes over refs (a pallas_call inside "
                            "pl.run_state)")


def _add_one_in_place(x_ref, y_ref):
    y_ref[...] = x_ref[...] + 1


def _no_outputs(x):
    def stateful(refs):
        pl.pallas_call(functools.partial(_add_one_in_place, *refs), out_shape=[], grid=(2,))()
    return pl.run_state(stateful)((x, jnp.zeros_like(x)))[1]


def test_a_kernel_with_no_outputs_is_interpreted_not_a_failed_batch():
    x = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
    result = run(_no_outputs, x, executor="vectorized")
    assert result.status == "ran" and result.ran_under == "interpret"
    assert result.batching[0].rule == ("the body closes over refs (a pallas_call inside "
                                       "pl.run_state)")
    np.testing.assert_array_equal(result.outputs[0], np.asarray(x) + 1)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _batchable(x):
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


def _broken(*args, **kwargs):
    raise RuntimeError("pallaslab's own bug")


@pytest.mark.parametrize(("where", "what"), [("plan_kernel", "could not plan the batching"),
                                             ("_callable", "could not batch")])
def test_vectorized_breaking_in_its_own_code_falls_back_to_the_interpreter(
        monkeypatch, where, what):
    monkeypatch.setattr(vectorized, where, _broken)
    x = jnp.ones((32, 128), jnp.float32)
    result = vectorized.VectorizedExecutor().execute(prepare(_batchable, (x,), {}, seed=0))
    assert result.status == "ran" and result.ran_under == "interpret"
    assert result.fallback == f"{what}: RuntimeError: pallaslab's own bug"
    assert result.notes[0] == f"vectorized fell back to interpret: {what}: RuntimeError: " \
                              "pallaslab's own bug"
    np.testing.assert_array_equal(result.outputs[0], np.full((32, 128), 2.0, np.float32))


def test_a_default_comparison_of_a_triton_kernel_pairs_interpreters_that_run_it():
    fn, args = load_function("tests/peer/gpu_triton.py:triton_unsigned_dot")()
    result = compare(fn, *args)
    assert result.executors == ("vectorized", "interpret")
    assert result.notes[0] == "executors chosen by default: vectorized, interpret"
    assert result.complete and result.passed


def test_jax_s_interpreter_cannot_run_a_rank0_atomic():
    """The limit is JAX's (pallaslab's run rewrites such atomics, model/_jax/atomics.py): if
    this starts passing, the rewrite may go."""
    def kernel(x_ref, init_ref, o_ref):
        plt.atomic_add(o_ref, (), x_ref[pl.program_id(0)])

    fn = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((), jnp.float32), grid=(4,),
                        input_output_aliases={1: 0}, interpret=True)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        fn(jnp.arange(4, dtype=jnp.float32), jnp.float32(0))


@pytest.mark.parametrize("executor", ["interpret", "vectorized"])
def test_a_rank0_atomic_runs_in_program_order(executor):
    fn, args = load_function("tests/peer/gpu_triton.py:triton_scalar_atomic_add")()
    result = run(fn, *args, executor=executor)
    assert result.status == "ran", result.reason
    np.testing.assert_allclose(result.outputs[0], np.sum(args[0]))


def _bounded_copy(x_hbm, slices_hbm, o_hbm, slices_smem):
    pltpu.sync_copy(slices_hbm, slices_smem)

    def index_map(i):
        start = slices_smem[i, 0]
        return (pl.ds(start, slices_smem[i, 1] - start), 0)

    spec = pl.BlockSpec((pl.BoundedSlice(8), 128), index_map)
    pltpu.emit_pipeline(_copy_block, grid=(4,), in_specs=[spec], out_specs=spec)(x_hbm, o_hbm)


def _copy_block(x_vmem, o_vmem):
    o_vmem[...] = x_vmem[...]


def _bounded(x, slices, interpret=False):
    anywhere = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(_bounded_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[anywhere, anywhere], out_specs=anywhere,
                          scratch_shapes=[pltpu.SMEM(slices.shape, jnp.int32)],
                          interpret=interpret)(x, slices)


BOUNDED_ARGS = (jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128),
                jnp.array([[0, 3], [3, 8], [8, 13], [13, 16]], jnp.int32))


def test_jax_s_interpreter_cannot_run_a_bounded_slice_window():
    """The limit is JAX's: if this starts passing, the translated error is dead code."""
    with abstract_tpu("v5e"), pytest.raises(TypeError, match="concrete value"):
        jax.jit(functools.partial(_bounded, interpret=True))(*BOUNDED_ARGS)


@pytest.mark.parametrize("executor", ["interpret", "vectorized"])
def test_a_bounded_slice_window_runs_as_row_copies_in_pallaslab_s_run(executor):
    """pallaslab's run copies a traced-size DMA row by row (model/_jax/traced_size_copies.py;
    tests/execute/test_bounded_slices.py)."""
    result = run(_bounded, *BOUNDED_ARGS, executor=executor)
    assert result.status == "ran", result.reason
    np.testing.assert_array_equal(result.outputs[0], BOUNDED_ARGS[0])
