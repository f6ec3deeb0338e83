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
from pallaslab.execute.executors import InterpretExecutor, execute_here, prepare
from pallaslab.execute.vectorized import VectorizedExecutor, plan_kernel

# Where XLA fuses the batched body differently the last bits may move (never more).
RTOL = {np.dtype(np.float32): 1e-5, np.dtype(jnp.bfloat16): 1e-2}


def _both(fn, args):
    prepared = prepare(fn, args)
    vec = execute_here(VectorizedExecutor(), prepared, float("inf"))
    ref = execute_here(get_interpreter(prepared), prepared, float("inf"))
    return vec, ref


def get_interpreter(prepared):
    from pallaslab.execute.auto import interpreter_for
    from pallaslab.execute.executors import get_executor

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
