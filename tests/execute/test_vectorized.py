"""The `vectorized` executor gives the interpreter's results on every catalog kernel, or falls
back with the rule that decided (issue 14)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import CATALOG, rand

import pallaslab
from pallaslab.execute.executors.interpret import InterpretExecutor
from pallaslab.execute.executors.vectorized import VectorizedExecutor, plan_kernel
from pallaslab.execute.prepared import prepare
from pallaslab.execute.worker.running import execute_here

# Where XLA fuses the batched body differently the last bits may move (never more): for float16
# (the attention case) that is one unit in the last place, up to 2**-10 relative.
RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 1e-3, np.dtype(jnp.bfloat16): 1e-2}


def _both(fn, args):
    prepared = prepare(fn, args)
    vec = execute_here(VectorizedExecutor(), prepared, float("inf"))
    ref = execute_here(get_interpreter(prepared), prepared, float("inf"))
    return vec, ref


def get_interpreter(prepared):
    from pallaslab.execute.executors.choice import interpreter_for
    from pallaslab.execute.registry import get_executor

    return get_executor(interpreter_for(list(prepared.capture)))


def _assert_same(vec, ref):
    assert vec.status == ref.status, (vec.error or vec.unavailable, ref.error or ref.unavailable)
    if ref.outputs is None:
        return
    for got, want in zip(vec.outputs, ref.outputs, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        if np.issubdtype(got.dtype, np.floating) or got.dtype == jnp.bfloat16:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                       rtol=RTOL.get(got.dtype, 1e-5), atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", [n for n, e in CATALOG.items() if "mesh" not in e.tags
                                  and "tpu-mesh" not in e.tags])
def test_catalog_kernel_matches_the_interpreter(name):
    fn, args = CATALOG[name].case()
    vec, ref = _both(fn, args)
    _assert_same(vec, ref)
    assert vec.executor == "vectorized" and vec.notes, "every run says how each kernel ran"


def test_independent_programs_are_batched_and_bit_equal():
    fn, args = CATALOG["matmul_f32"].case()
    vec, ref = _both(fn, args)
    assert vec.notes == ('matmul_kernel: batched over grid dimension(s) 0, 1 (dimension 2 is '
                         'not "parallel" and the kernel has scratch)',)
    for got, want in zip(vec.outputs, ref.outputs, strict=True):
        np.testing.assert_array_equal(got, want)


def test_revisited_output_is_scanned_in_order():
    fn, args = CATALOG["reduction_revisited_output"].case()
    vec, ref = _both(fn, args)
    assert vec.notes == ("row_sum_kernel: scanned program by program (an output block is "
                         "revisited along dimension 0)",)
    _assert_same(vec, ref)


def test_shared_output_blocks_are_not_batched():
    fn, args = CATALOG["output_revisit_clobber"].case()
    vec, ref = _both(fn, args)
    assert "output blocks are shared between batched programs" in vec.notes[0]
    _assert_same(vec, ref)


def test_order_dependent_body_falls_back_with_its_rule():
    fn, args = CATALOG["manual_dma_double_buffer"].case()
    vec, ref = _both(fn, args)
    assert vec.notes[0].startswith("vectorized fell back to interpret for "
                                   "_double_buffered_copy: the body uses DMAs")
    _assert_same(vec, ref)


def _print_kernel(x_ref, o_ref):
    pl.debug_print("program {}", pl.program_id(0))
    o_ref[...] = x_ref[...] + 1.0


def test_debug_prints_keep_the_interpreter_and_its_prints():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(_print_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), in_specs=[spec], out_specs=spec)(x)

    vec, ref = _both(fn, (rand((32, 128)),))
    assert "debug prints (their order is the program order)" in vec.notes[0]
    assert [p.text for p in vec.prints] == [p.text for p in ref.prints]
    _assert_same(vec, ref)


def _inplace_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 3.0


def _aliased(shift: int):
    def fn(x):
        return pl.pallas_call(
            _inplace_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: ((i + shift) % 4, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            input_output_aliases={0: 0})(x)
    return fn


def test_in_place_aliasing_is_batched_and_shifted_aliasing_scanned():
    x = rand((32, 128))
    vec, ref = _both(_aliased(0), (x,))
    assert vec.notes == ("_inplace_kernel: batched over grid dimension(s) 0",)
    _assert_same(vec, ref)
    vec, ref = _both(_aliased(1), (x,))
    assert vec.notes == ("_inplace_kernel: scanned program by program (outputs aliases "
                         "args[0] and reads it through other blocks than it writes)",)
    _assert_same(vec, ref)  # program 3 reads block 0, which program 0 already overwrote


def _carry_kernel(x_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += x_ref[...]
    o_ref[...] = acc_ref[...]


def test_scratch_carried_across_an_arbitrary_dimension_is_scanned():
    """A running sum carried in scratch from program to program: batching would break it."""
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(_carry_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), in_specs=[spec], out_specs=spec,
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)

    x = rand((32, 128))
    vec, ref = _both(fn, (x,))
    assert vec.notes == ('_carry_kernel: scanned program by program (dimension 0 is not '
                         '"parallel" and the kernel has scratch)',)
    _assert_same(vec, ref)
    blocks = np.asarray(x).reshape(4, 8, 128)
    np.testing.assert_allclose(vec.outputs[0].reshape(4, 8, 128), np.cumsum(blocks, axis=0),
                               rtol=1e-6)


def test_plan_of_a_mesh_kernel_says_it_is_interpreted():
    fn, args = CATALOG["gpu_mesh_kernel"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    plan = plan_kernel(kernel)
    assert plan.plan is None and plan.reason == "mesh kernels are not batched"


def test_public_run_uses_the_worker():
    fn, args = CATALOG["elementwise_2d_add"].case()
    result = pallaslab.run(fn, *args, executor="vectorized")
    assert result.status == "ran" and result.executor == "vectorized"
    want = InterpretExecutor()
    ref = pallaslab.run(fn, *args, executor=want)
    np.testing.assert_array_equal(result.outputs[0], ref.outputs[0])


SHIPPED = ("tpu_flash_attention", "tpu_matmul", "tpu_megablox_gmm", "tpu_paged_attention",
           "gpu_softmax", "gpu_attention")


@pytest.mark.parametrize("name", SHIPPED)
def test_jax_shipped_kernels_match_the_interpreter_or_say_why_not(name):
    """JAX's own kernels: batched where they qualify, otherwise interpreted with the rule."""
    from pallaslab.cases import load_function

    fn, args = load_function(f"tests/cases/shipped.py:{name}")()
    vec, ref = _both(fn, args)
    _assert_same(vec, ref)
    assert vec.notes and all(": " in n for n in vec.notes)


# The reshape path: regularly tiled operands are sliced and transposed, not gathered and
# scattered; irregular ones keep the gather path (issue 14's speed-up).

def _vectorized_hlo(prepared) -> str:
    from pallaslab.model._jax import vectorize

    cap = prepared.capture
    plans = {id(k.handle.eqn): p.plan for k, p in zip(cap, VectorizedExecutor().plans(prepared),
                                                      strict=True)}
    call = vectorize.vectorized_jaxpr_callable(cap.handle.closed_jaxpr, plans)
    return jax.jit(call).lower(*prepared.flat_args).as_text()


def _layouts(fn, args):
    (kernel,) = pallaslab.capture(fn, *args)
    return dict(plan_kernel(kernel).plan.layouts)


def _tiled_add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def test_regular_tiling_is_sliced_not_gathered():
    def fn(x, y):
        spec = pl.BlockSpec((16, 128), lambda i, j: (i, j))
        row = pl.BlockSpec((16, 128), lambda i, j: (i, 0))  # the same block for every j
        return pl.pallas_call(_tiled_add, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4, 2), in_specs=[spec, row], out_specs=spec)(x, y)

    args = (rand((64, 256)), rand((64, 128), seed=1))
    assert _layouts(fn, args) == {"args[0]": ((0, 0), (1, 0)), "args[1]": ((0, 0), (None, 0)),
                                  "outputs": ((0, 0), (1, 0))}
    vec, ref = _both(fn, args)
    np.testing.assert_array_equal(vec.outputs[0], ref.outputs[0])
    hlo = _vectorized_hlo(prepare(fn, args))
    assert "scatter" not in hlo and "gather" not in hlo
    assert "0x7FC00000" not in hlo  # fully written: no NaN fill of the output (f32 NaN)


def _transpose_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...].T


def test_permuted_index_map_transposes_blocks():
    def fn(x):
        return pl.pallas_call(
            _transpose_kernel, out_shape=jax.ShapeDtypeStruct(x.shape[::-1], x.dtype),
            grid=(4, 2), in_specs=[pl.BlockSpec((32, 64), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((64, 32), lambda i, j: (j, i)))(x)

    x = rand((128, 128))
    assert _layouts(fn, (x,))["outputs"] == ((1, 0), (0, 0))
    vec, ref = _both(fn, (x,))
    np.testing.assert_array_equal(vec.outputs[0], ref.outputs[0])
    np.testing.assert_array_equal(vec.outputs[0], np.asarray(x).T)
    assert "scatter" not in _vectorized_hlo(prepare(fn, (x,)))


def _double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_non_divisible_edge_block_keeps_the_gather_path():
    def fn(x):
        spec = pl.BlockSpec((32, 128), lambda i: (i, 0))
        return pl.pallas_call(_double_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(pl.cdiv(x.shape[0], 32),), in_specs=[spec],
                              out_specs=spec)(x)

    x = rand((100, 128))
    assert _layouts(fn, (x,)) == {}
    vec, ref = _both(fn, (x,))
    np.testing.assert_array_equal(vec.outputs[0], ref.outputs[0])
    assert "scatter" in _vectorized_hlo(prepare(fn, (x,)))


@pytest.mark.parametrize("shift", [0, 1])
def test_output_not_fully_covered_keeps_nan_where_unwritten(shift):
    def fn(x):
        return pl.pallas_call(
            _double_kernel, out_shape=jax.ShapeDtypeStruct((64, 128), x.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((16, 128), lambda i: (i + shift, 0)))(x)

    x = rand((32, 128))
    assert _layouts(fn, (x,))["outputs"] == ((0, shift), (None, 0))
    vec, ref = _both(fn, (x,))
    np.testing.assert_array_equal(vec.outputs[0], ref.outputs[0])  # NaN where NaN
    written = np.zeros(64, bool)
    written[16 * shift:16 * shift + 32] = True
    assert np.isnan(vec.outputs[0][~written]).all()
    np.testing.assert_array_equal(vec.outputs[0][written], np.asarray(x) * 2.0)


def test_scalar_prefetch_index_maps_keep_the_gather_path():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    assert _layouts(fn, args) == {}
    vec, ref = _both(fn, args)
    _assert_same(vec, ref)
