"""The shared catalog of example Pallas kernels, used by every test in the project.

Each entry is a *case* in the CLI's sense (`tests/kernels.py:NAME`): a zero-argument function
returning `(fn, args)`. Arguments are small concrete arrays (deterministic, seeded) so every
executor can run them; `abstract(args)` turns them into `jax.ShapeDtypeStruct`s.

`CATALOG` maps name -> `Entry(case, tags, findings)`: `findings` are the finding codes the
tiling analysis must raise for the kernel (and no others of error severity); tags say which
backends a kernel is written for ("tpu", "gpu") and what it exercises.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from catalog import CATALOG, Entry, abstract, case, catalog_names, rand
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

__all__ = ["CATALOG", "Entry", "abstract", "case", "catalog_names", "rand"]


TPU_PARALLEL_2D = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel"))


# --- kernel bodies -------------------------------------------------------------------------


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


def layer_norm_kernel(x_ref, w_ref, b_ref, o_ref):
    x = x_ref[...]
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    o_ref[...] = (x - mean) * jax.lax.rsqrt(var + 1e-5) * w_ref[...] + b_ref[...]


def row_sum_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _init():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.sum(x_ref[...].reshape(-1, 8, x_ref.shape[-1]), axis=0)


def gather_kernel(idx_ref, x_ref, o_ref):
    del idx_ref  # the gather happens in the index map
    o_ref[...] = x_ref[...]


# --- kernel launchers ------------------------------------------------------------------------


def matmul(x, y, *, bm=128, bk=128, bn=128, **kw):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
        **kw,
    )(x, y)


def elementwise_2d(x, y, *, block=(64, 128), **kw):
    grid = (pl.cdiv(x.shape[0], block[0]), pl.cdiv(x.shape[1], block[1]))
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return pl.pallas_call(
        add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
        in_specs=[spec, spec], out_specs=spec, **kw,
    )(x, y)


# --- the catalog -----------------------------------------------------------------------------


@case("tpu", "gpu", "no-grid")
def vector_add():
    def fn(x, y):
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    return fn, (rand((1024,)), rand((1024,), seed=1))


@case("tpu", "gpu")
def elementwise_1d():
    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
            in_specs=[pl.BlockSpec((1024,), lambda i: (i,))],
            out_specs=pl.BlockSpec((1024,), lambda i: (i,)),
        )(x)

    return fn, (rand((8192,)),)


@case("tpu", "gpu")
def elementwise_2d_add():
    fn = functools.partial(elementwise_2d, compiler_params=TPU_PARALLEL_2D)
    return fn, (rand((256, 512)), rand((256, 512), seed=1))


@case("tpu", "matmul")
def matmul_f32():
    return matmul, (rand((512, 256)), rand((256, 384), seed=1))


@case("tpu", "matmul")
def matmul_bf16():
    return matmul, (rand((512, 256), jnp.bfloat16), rand((256, 384), jnp.bfloat16, seed=1))


@case("tpu", "gpu")
def row_softmax():
    def fn(x):
        return pl.pallas_call(
            softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // 32,),
            in_specs=[pl.BlockSpec((32, x.shape[1]), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((32, x.shape[1]), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(x)

    return fn, (rand((256, 512)),)


@case("tpu", "gpu")
def layer_norm():
    def fn(x, w, b):
        rows, cols = 32, x.shape[1]
        return pl.pallas_call(
            layer_norm_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid=(x.shape[0] // rows,),
            in_specs=[pl.BlockSpec((rows, cols), lambda i: (i, 0)),
                      pl.BlockSpec((1, cols), lambda i: (0, 0)),
                      pl.BlockSpec((1, cols), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((rows, cols), lambda i: (i, 0)),
        )(x, w, b)

    return fn, (rand((256, 512)), rand((1, 512), seed=1), rand((1, 512), seed=2))


def row_sum(x, semantics):
    """Sums 128-row blocks of x into one (8, cols) output block, revisited by every program."""
    return pl.pallas_call(
        row_sum_kernel, out_shape=jax.ShapeDtypeStruct((8, x.shape[1]), x.dtype),
        grid=(x.shape[0] // 128,),
        in_specs=[pl.BlockSpec((128, x.shape[1]), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((8, x.shape[1]), lambda k: (0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics),
    )(x)


@case("tpu", "revisit")
def reduction_revisited_output():
    """The reduction axis is "arbitrary": consecutive revisits of one accumulator block."""
    return functools.partial(row_sum, semantics=("arbitrary",)), (rand((1024, 256)),)


@case("tpu", "scalar-prefetch")
def scalar_prefetch_gather():
    """Gathers 8-row blocks of x in the order given by a scalar-prefetched index array."""

    def fn(idx, x):
        return pl.pallas_call(
            gather_kernel, out_shape=jax.ShapeDtypeStruct((idx.shape[0] * 8, x.shape[1]), x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(idx.shape[0],),
                in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i, idx_ref: (idx_ref[i], 0))],
                out_specs=pl.BlockSpec((8, x.shape[1]), lambda i, idx_ref: (i, 0)),
            ),
        )(idx, x)

    return fn, (jnp.array([3, 1, 2, 0, 3, 3], jnp.int32), rand((32, 128)))


@case("tpu", "squeezed")
def squeezed_dims():
    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0],),
            in_specs=[pl.BlockSpec((None, 64, 256), lambda b: (b, 0, 0))],
            out_specs=pl.BlockSpec((None, 64, 256), lambda b: (b, 0, 0)),
        )(x)

    return fn, (rand((4, 64, 256)),)


@case("tpu", "partial")  # its edge padding reaches only dropped writes: an info
def partial_blocks():
    fn = functools.partial(elementwise_2d, compiler_params=TPU_PARALLEL_2D)
    return fn, (rand((200, 256)), rand((200, 256), seed=1))


@case("tpu", "racy", findings=("parallel-write-conflict",))
def racy_parallel_accumulate():
    """Every program adds into output block (0, 0) although the grid axis is "parallel"."""
    return functools.partial(row_sum, semantics=("parallel",)), (rand((512, 128)),)


@case("tpu", "uncovered", findings=("uncovered-output",))
def uncovered_output():
    """The grid covers 2 of the output's 4 row blocks: rows 128..255 are never written."""

    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        )(x)

    return fn, (rand((256, 128)),)


@case("tpu", "misaligned", findings=("tpu-block-shape",))
def tpu_misaligned():
    """Blocks of (10, 100): neither a multiple of (8, 128) nor the full array."""
    fn = functools.partial(elementwise_2d, block=(10, 100), compiler_params=TPU_PARALLEL_2D)
    return fn, (rand((40, 200)), rand((40, 200), seed=1))


@case("tpu", "out-of-bounds", findings=("block-out-of-bounds",))
def out_of_bounds_block():
    """The input index map is off by one: the last program reads block 4 of a 4-block array."""

    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i + 1, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        )(x)

    return fn, (rand((256, 128)),)


@case("tpu", "revisit", findings=("output-revisit",))
def output_revisit_clobber():
    """Output blocks 0, 1, 0, 1: block 0 is written back at step 0 and again at step 2."""

    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct((128, 128), x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i % 2, 0)),
        )(x)

    return fn, (rand((256, 128)),)


@case("tpu", "vmap")
def vmapped_kernel():
    fn = jax.vmap(functools.partial(elementwise_2d, compiler_params=TPU_PARALLEL_2D))
    return fn, (rand((3, 128, 256)), rand((3, 128, 256), seed=1))


@jax.custom_vjp
def pallas_double(x):
    return pl.pallas_call(
        scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 64,),
        in_specs=[pl.BlockSpec((64, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((64, x.shape[1]), lambda i: (i, 0)),
    )(x)


def _double_fwd(x):
    return pallas_double(x), None


def _double_bwd(_, g):
    return (2.0 * g,)


pallas_double.defvjp(_double_fwd, _double_bwd)


@case("tpu", "custom_vjp")
def custom_vjp_kernel():
    return jax.jit(lambda x: pallas_double(x) + 1.0), (rand((256, 128)),)


@case("tpu", "scan")
def kernel_in_scan():
    def fn(x):
        def body(carry, _):
            return pallas_double(carry), None

        return jax.lax.scan(body, x, length=3)[0]

    return fn, (rand((128, 128)),)


@case("tpu", "cond")
def kernel_in_cond():
    def fn(p, x):
        return jax.lax.cond(p, pallas_double, lambda v: v, x)

    return fn, (jnp.bool_(True), rand((128, 128)))


@case("tpu", "shard_map")
def kernel_in_shard_map():
    mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    spec = jax.sharding.PartitionSpec("x")
    fn = jax.shard_map(pallas_double, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
    return fn, (rand((128, 128)),)


@case("tpu", "multi-kernel")
def two_kernels():
    """A matmul followed by a softmax over its rows: two launches, in that order."""
    softmax_fn = row_softmax()[0]
    return (lambda x, y: softmax_fn(matmul(x, y))), (rand((256, 256)), rand((256, 512), seed=1))


@case("gpu", "mesh", reference=lambda x: x + 1.0)
def gpu_mesh_kernel():
    from jax.experimental.pallas import mosaic_gpu as plgpu

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      grid=(2,), grid_names=("x",))
    return fn, (rand((256,)),)


@case("tpu", "vmem", findings=("vmem-overflow",))
def vmem_overflow():
    """(1024, 2048) f32 blocks: 8 MiB each, double-buffered in and out = 32 MiB of VMEM, over
    the 16 MiB default scoped limit of v5e and (with the f32 scratch) the 32 MiB of v6e by the
    estimate. libtpu elides the scratch (written and read straight back) and compiles it for
    v6e: `check --compile` lets the compiler's verdict stand."""

    def body(x_ref, o_ref, acc_ref):
        acc_ref[...] = x_ref[...] * 2.0
        o_ref[...] = acc_ref[...]

    def fn(x):
        spec = pl.BlockSpec((1024, 2048), lambda i: (i, 0))
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[spec], out_specs=spec,
            scratch_shapes=[pltpu.VMEM((1024, 2048), jnp.float32)],
        )(x)

    return fn, (rand((2048, 2048)),)




@case("tpu", "gpu", "wrong")
def shifted_block_wrong():
    """Meant to double x block by block, but program (2,) reads input block 3 instead of 2:
    output block (2, 0) is wrong and every other block is right. Reference: `2 * x`."""

    def fn(x):
        return pl.pallas_call(
            scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((64, 128), lambda i: (jnp.where(i == 2, 3, i), 0))],
            out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)),
        )(x)

    return fn, (rand((256, 128)),)


def shifted_block_reference(x):
    return x * 2.0


# The advanced TPU kernels (emit_pipeline, manual DMAs, mesh kernels, the fuser) live in their
# own module; importing it registers them in CATALOG and makes `tests/kernels.py:NAME` find them.
from kernels_tpu import *  # noqa: E402, F403
from kernels_tpu import __all__ as _tpu_cases  # noqa: E402

__all__ += _tpu_cases

# GPU kernels: Triton idioms (masks, atomics) and Mosaic GPU (`plgpu.kernel`, TMA, barriers).
from kernels_gpu import *  # noqa: E402, F403
from kernels_gpu import __all__ as _gpu_cases  # noqa: E402
from kernels_mgpu import *  # noqa: E402, F403
from kernels_mgpu import __all__ as _mgpu_cases  # noqa: E402

# Kernels that talk between devices (shard_map, remote DMAs, semaphores).
from kernels_multi import *  # noqa: E402, F403
from kernels_multi import __all__ as _multi_cases  # noqa: E402

# What production kernels exposed: narrow outputs, grids computed by an earlier kernel.
from kernels_prod import *  # noqa: E402, F403
from kernels_prod import __all__ as _prod_cases  # noqa: E402

__all__ += _gpu_cases + _mgpu_cases + _prod_cases + _multi_cases
