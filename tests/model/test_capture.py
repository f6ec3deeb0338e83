"""Capture: every kernel a call launches, under every transformation, with its operands."""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import line_of
from jax.experimental import pallas as pl
from kernels import CATALOG, abstract, rand

import pallaslab
from pallaslab.model import select_kernel


@pytest.mark.parametrize("name", list(CATALOG))
@pytest.mark.parametrize("mode", ["concrete", "abstract"])
def test_every_catalog_kernel_captures(name, mode):
    fn, args = CATALOG[name].case()
    cap = pallaslab.capture(fn, *(abstract(args) if mode == "abstract" else args))
    cap.check_invariants()
    assert len(cap) >= 1
    assert cap.concrete == (mode == "concrete")
    for k in cap:
        assert k.name and k.source and k.source.endswith(".py:" + k.source.rsplit(":", 1)[1])


def test_matmul_operands_and_params():
    fn, args = CATALOG["matmul_f32"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.name == "matmul_kernel"
    assert k.source.endswith("kernels.py:" + str(line_of("def matmul_kernel")))
    assert k.grid == (4, 3, 2) and k.programs == 24
    assert k.dimension_semantics == ("parallel", "parallel", "arbitrary")
    assert k.backend == "tpu"
    assert [(op.origin, op.role) for op in k.operands] == [
        ("args[0]", "input"), ("args[1]", "input"), ("outputs", "output"),
        ("scratch[0]", "scratch")]
    x, y, out, acc = k.operands
    assert x.shape == (512, 256) and x.block_shape == (128, 128) and x.buffer_count == 2
    assert y.shape == (256, 384) and out.shape == (512, 384)
    assert acc.shape == (128, 128) and acc.dtype == np.float32 and acc.memory_space == "vmem"
    assert "dot_general" in k.kernel_jaxpr
    assert x.index_map_jaxpr and "lambda" in x.index_map_jaxpr


def test_squeezed_dims_are_none_in_block_shape():
    fn, args = CATALOG["squeezed_dims"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.operands[0].block_shape == (None, 64, 256)
    assert k.operands[0].block_extent == (1, 64, 256)


def test_vmap_adds_a_grid_dimension():
    fn, args = CATALOG["vmapped_kernel"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.grid == (3, 2, 2) and k.vmapped_dims == (0,)
    assert k.operands[0].shape == (3, 128, 256)
    assert k.operands[0].block_shape == (None, 64, 128)


@pytest.mark.parametrize(("name", "context"), [
    ("custom_vjp_kernel", ("jit", "custom_vjp")),
    ("kernel_in_scan", ("scan[length=3]", "custom_vjp")),
    ("kernel_in_cond", ("cond[branch 1]", "custom_vjp")),
    ("kernel_in_shard_map", ("shard_map", "custom_vjp")),
])
def test_kernels_found_inside_transformations(name, context):
    fn, args = CATALOG[name].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.context == context
    assert k.name == "scale_kernel"


def test_launch_order_and_selection():
    fn, args = CATALOG["two_kernels"].case()
    cap = pallaslab.capture(fn, *args)
    assert [k.name for k in cap] == ["matmul_kernel", "softmax_kernel"]
    assert [k.index for k in cap] == [0, 1]
    assert select_kernel(cap, "softmax_kernel").index == 1
    assert select_kernel(cap, -1).index == 1


def test_scalar_prefetch_values_when_concrete():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    (k,) = pallaslab.capture(fn, *args)
    (idx,) = k.scalar_prefetch
    assert idx.origin == "args[0]" and idx.memory_space == "smem" and idx.role == "input"
    np.testing.assert_array_equal(k.prefetch_values[0], np.asarray(args[0]))
    (ka,) = pallaslab.capture(fn, *abstract(args))
    assert ka.prefetch_values == ()


def test_no_grid_kernel():
    fn, args = CATALOG["vector_add"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.grid == () and k.programs == 1
    assert k.operands[0].block_shape == (1024,)


def test_mesh_kernel_captured_with_its_mesh():
    fn, args = CATALOG["gpu_mesh_kernel"].case()
    (k,) = pallaslab.capture(fn, *args)
    assert k.kind == "mesh" and k.name == "body" and k.backend == "mosaic_gpu"
    assert k.mesh is not None and k.mesh.axes == (("x", 2),)
    assert k.grid == (2,) and k.grid_names == ("x",)
    assert [op.origin for op in k.operands] == ["args[0]", "outputs"]
    assert all(op.block_shape is None for op in k.operands)


def test_grid_spec_cost_estimate_aliases_and_buffering():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def fn(x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pl.GridSpec(grid=(2,), in_specs=[
                pl.BlockSpec((64, 128), lambda i: (i, 0), pipeline_mode=pl.Buffered(3))],
                out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0))),
            input_output_aliases={0: 0},
            cost_estimate=pl.CostEstimate(flops=10, transcendentals=0, bytes_accessed=99),
            name="plus_one",
        )(x)

    (k,) = pallaslab.capture(fn, rand((128, 128)))
    assert k.name == "plus_one"
    assert k.operands[0].buffer_count == 3 and k.operands[1].buffer_count == 2
    assert k.input_output_aliases == ((0, 0),)
    assert k.operands[0].aliased_with == "outputs" and k.operands[1].aliased_with == "args[0]"
    assert k.cost_estimate is not None and k.cost_estimate.bytes_accessed == 99


# --- JAX's own shipped kernels ----------------------------------------------------------------


def test_jax_tpu_flash_attention():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    q = jax.ShapeDtypeStruct((2, 4, 512, 128), jnp.float32)
    sizes = fa.BlockSizes(block_q=128, block_k_major=256, block_k=128, block_b=1)
    (k,) = pallaslab.capture(functools.partial(fa.flash_attention, block_sizes=sizes), q, q, q)
    # batch / block_b, heads, q_len / block_q, kv_len / block_k_major
    assert k.grid == (2, 4, 4, 2)
    # flash_attention writes its block shapes as (block_b, 1, block, head_dim)
    assert k.operands[0].block_shape == (1, 1, 128, 128)
    assert k.operands[1].block_shape == (1, 1, 256, 128)
    assert k.dimension_semantics == ("parallel", "parallel", "parallel", "arbitrary")


def test_jax_tpu_matmul():
    from jax.experimental.pallas.ops.tpu import matmul as tm

    x = jax.ShapeDtypeStruct((1024, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((512, 768), jnp.float32)
    fn = functools.partial(tm.matmul, block_shape=(256, 256), block_k=128)
    (k,) = pallaslab.capture(fn, x, y)
    assert k.grid == (4, 3, 4)
    assert [op.block_shape for op in k.inputs] == [(256, 128), (128, 256)]


def test_jax_megablox_gmm_data_dependent_grid():
    gmm = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
    lhs, rhs = rand((512, 256)), rand((4, 256, 256))
    group_sizes = jnp.array([128, 0, 256, 128], jnp.int32)
    fn = functools.partial(gmm.gmm, tiling=(128, 128, 128))
    (k,) = pallaslab.capture(fn, lhs, rhs, group_sizes)
    # The middle grid dimension counts active (group, m-tile) pairs: data-dependent.
    assert k.dynamic_grid_dims == (1,)
    assert k.grid == (2, 4, 2)
    assert [op.origin for op in k.scalar_prefetch] == [
        "args[0][0]", "args[0][1]", "args[0][2]", "args[1]"]
    (ka,) = pallaslab.capture(fn, *abstract((lhs, rhs, group_sizes)))
    assert ka.grid == (2, None, 2) and ka.programs is None


def test_jax_tpu_paged_attention():
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    heads, kv_heads, head_dim, page, pages = 4, 4, 128, 16, 32
    q = rand((2, heads, head_dim))
    k_pages = rand((kv_heads, pages, page, head_dim), seed=1)
    v_pages = rand((kv_heads, pages, page, head_dim), seed=2)
    lengths = jnp.array([40, 64], jnp.int32)
    page_indices = jnp.arange(2 * 8, dtype=jnp.int32).reshape(2, 8)
    fn = functools.partial(paged_attention, pages_per_compute_block=4)
    (k,) = pallaslab.capture(fn, q, k_pages, v_pages, lengths, page_indices)
    # (num_cores, batch, kv_heads) with inline_seq_dim (the default)
    assert k.grid == (1, 2, 4)
    assert [op.origin for op in k.scalar_prefetch][:2] == ["args[0]", "args[1]"]
    np.testing.assert_array_equal(k.prefetch_values[0], np.asarray(lengths))
    assert k.operand("args[5]").memory_space == "any"  # pages stay in HBM: manual DMA


def test_triton_softmax_and_attention():
    # JAX 0.12.1 removed its Triton kernels (jax.experimental.pallas.ops.gpu): these are ours,
    # written the same way (tests/cases/triton_kernels.py).
    from cases.triton_kernels import mha, softmax

    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    (k,) = pallaslab.capture(softmax, x)  # a kernel for one row, vmapped over the rows
    assert k.backend == "triton" and k.grid == (64,)
    assert k.operands[0].block_shape == (None, 256)

    q = jax.ShapeDtypeStruct((1, 256, 2, 64), jnp.float16)
    (a,) = pallaslab.capture(mha, q, q, q)
    assert a.backend == "triton"
    # grid: (q_len / block_q, batch, heads) with the default block_q = 128
    assert a.grid == (2, 1, 2)


def test_kernel_inside_while_loop():
    from kernels import pallas_double

    def fn(x, n):
        return jax.lax.while_loop(lambda c: c[1] < n, lambda c: (pallas_double(c[0]), c[1] + 1),
                                  (x, 0))[0]

    (k,) = pallaslab.capture(fn, rand((128, 128)), 3)
    assert k.context == ("while", "custom_vjp")


def test_tpu_pl_kernel_mesh():
    from jax.experimental.pallas import tpu as pltpu

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=1)
    fn = pl.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32), mesh=mesh)
    (k,) = pallaslab.capture(fn, rand((8, 128)))
    assert k.kind == "mesh" and k.backend == "tpu"
    assert k.mesh.kind == "TensorCoreMesh" and k.mesh.axes == (("core", 1),)


def test_array_free_arguments_are_passed_as_python_values():
    def fn(x, rows, *, interpret=False, name="doubling"):
        assert isinstance(rows, int) and interpret is True  # not tracers
        return pl.pallas_call(
            lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // rows,), in_specs=[pl.BlockSpec((rows, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, 128), lambda i: (i, 0)), name=name,
            interpret=interpret)(x)

    (k,) = pallaslab.capture(fn, rand((64, 128)), 16, interpret=True)
    assert k.grid == (4,) and k.name == "doubling"
