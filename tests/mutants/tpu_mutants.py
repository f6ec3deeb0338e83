"""Single-bug TPU BlockSpec kernels (run under the HLO interpreter), and their originals."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from mutant_registry import line_of, mutant, original


def rand(shape, seed=0, dtype=jnp.float32):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


# -- matmul ---------------------------------------------------------------------------------

def matmul_ref(x, y):
    return jnp.dot(x, y, preferred_element_type=jnp.float32)


def _matmul_body(x_ref, y_ref, o_ref, acc_ref, *, init=True, transpose=False):
    if init:
        @pl.when(pl.program_id(2) == 0)
        def _init():
            acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...],
                            preferred_element_type=jnp.float32).astype(acc_ref.dtype)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        out = acc_ref[...].T if transpose else acc_ref[...]
        o_ref[...] = out.astype(o_ref.dtype)


def _matmul(x, y, *, x_map=lambda i, j, kk: (i, kk), y_map=lambda i, j, kk: (kk, j),
            o_map=lambda i, j, kk: (i, j), acc=jnp.float32, body=_matmul_body, b=128):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // b, n // b, k // b),
        in_specs=[pl.BlockSpec((b, b), x_map), pl.BlockSpec((b, b), y_map)],
        out_specs=pl.BlockSpec((b, b), o_map),
        scratch_shapes=[pltpu.VMEM((b, b), acc)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")))(x, y)


def _mm_args():
    return rand((256, 384)), rand((384, 256), seed=1)


@original(matmul_ref)
def matmul_ok():
    return _matmul, _mm_args()


@mutant("matmul_ok", "y's index map swaps its block coordinates", matmul_ref,
        kind="index-map", words=("args[1]", "transposed"), operand="args[1]")
def matmul_y_map_swapped():
    x, y = rand((256, 256)), rand((256, 256), seed=1)
    return functools.partial(_matmul, y_map=lambda i, j, kk: (j, kk)), (x, y)


@mutant("matmul_ok", "x's index map takes the column program id for its row block",
        matmul_ref, kind="index-map", words=("args[0]",), operand="args[0]")
def matmul_x_map_wrong_axis():
    return functools.partial(_matmul, x_map=lambda i, j, kk: (j, kk)), _mm_args()


@mutant("matmul_ok", "the output's index map is transposed", matmul_ref,
        kind="index-map", words=("outputs", "transposed"), operand="outputs")
def matmul_out_map_transposed():
    x, y = rand((256, 256)), rand((256, 256), seed=1)
    return functools.partial(_matmul, o_map=lambda i, j, kk: (j, i)), (x, y)


@mutant("matmul_ok", "the accumulator is not zeroed on the first k step", matmul_ref,
        kind="first-visit", words=("scratch[0]", "before any program wrote it"))
def matmul_no_acc_init():
    return functools.partial(_matmul, body=functools.partial(_matmul_body, init=False)), \
        _mm_args()


@mutant("matmul_ok", "the accumulator is bfloat16, not float32", matmul_ref,
        kind="line", words=(f"all last written by {line_of(__file__, 'o_ref[...] = out.astype')}",))
def matmul_bf16_accumulator():
    return functools.partial(_matmul, acc=jnp.bfloat16), _mm_args()


@mutant("matmul_ok", "the finished tile is stored transposed", matmul_ref,
        kind="line", words=(f"all last written by {line_of(__file__, 'o_ref[...] = out.astype')}",))
def matmul_tile_transposed():
    x, y = rand((256, 256)), rand((256, 256), seed=1)
    return functools.partial(
        _matmul, body=functools.partial(_matmul_body, transpose=True)), (x, y)


# -- elementwise, 1-D blocks ----------------------------------------------------------------

def shift_add_ref(x, y):
    return x + 2.0 * y


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + 2.0 * y_ref[...]


def _add(x, y, *, y_map=lambda i: (i,), b=256):
    n = x.shape[0]
    return pl.pallas_call(
        _add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n // b,),
        in_specs=[pl.BlockSpec((b,), lambda i: (i,)), pl.BlockSpec((b,), y_map)],
        out_specs=pl.BlockSpec((b,), lambda i: (i,)))(x, y)


@original(shift_add_ref)
def add_ok():
    return _add, (rand((2048,)), rand((2048,), seed=1))


@mutant("add_ok", "y's index map is off by one (wrapping at the end)", shift_add_ref,
        kind="index-map", words=("args[1]", "off by one"), operand="args[1]")
def add_y_map_off_by_one():
    return functools.partial(_add, y_map=lambda i: ((i + 1) % 8,)), \
        (rand((2048,)), rand((2048,), seed=1))


# -- causal mask ----------------------------------------------------------------------------

def causal_ref(x):
    r = jnp.arange(x.shape[0])[:, None]
    c = jnp.arange(x.shape[1])[None, :]
    return jnp.where(r >= c, x, 0.0)


def _causal_kernel(x_ref, o_ref, *, transposed=False, b=128):
    i, j = pl.program_id(0), pl.program_id(1)
    r = i * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 0)
    c = j * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 1)
    keep = (c >= r) if transposed else (r >= c)
    o_ref[...] = jnp.where(keep, x_ref[...], 0.0)


def _causal(x, *, kernel=_causal_kernel, b=128):
    spec = pl.BlockSpec((b, b), lambda i, j: (i, j))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // b, x.shape[1] // b), in_specs=[spec],
                          out_specs=spec)(x)


@original(causal_ref)
def causal_ok():
    return _causal, (rand((256, 256)),)


@mutant("causal_ok", "the causal mask is transposed", causal_ref,
        kind="line", words=(f"all last written by {line_of(__file__, 'jnp.where(keep,')}",))
def causal_mask_transposed():
    return functools.partial(
        _causal, kernel=functools.partial(_causal_kernel, transposed=True)), (rand((256, 256)),)


@mutant("causal_ok", "the row offset uses the column program id", causal_ref,
        kind="line", words=(f"all last written by {line_of(__file__, 'jnp.where(r >= c, x_ref')}",
                            "programs (0, 1), (1, 0)"))
def causal_wrong_program_id_axis():
    def kernel(x_ref, o_ref, b=128):
        i = pl.program_id(1)  # the bug: should be pl.program_id(0)
        j = pl.program_id(1)
        r = i * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 0)
        c = j * b + jax.lax.broadcasted_iota(jnp.int32, (b, b), 1)
        o_ref[...] = jnp.where(r >= c, x_ref[...], 0.0)

    return functools.partial(_causal, kernel=kernel), (rand((256, 256)),)


# -- row sums: a reduction over the grid into its output ------------------------------------

def row_sum_ref(x):
    return jnp.broadcast_to(x.reshape(-1, 8, x.shape[1]).sum(0), (8, x.shape[1]))


def _row_sum_kernel(x_ref, o_ref, *, init=True):
    if init:
        @pl.when(pl.program_id(0) == 0)
        def _init():
            o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...].reshape(-1, 8, x_ref.shape[1]).sum(0)


def _row_sum(x, *, semantics=("arbitrary",), kernel=_row_sum_kernel):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, x.shape[1]), x.dtype),
        grid=(x.shape[0] // 128,), in_specs=[pl.BlockSpec((128, x.shape[1]), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((8, x.shape[1]), lambda k: (0, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=semantics))(x)


@original(row_sum_ref)
def row_sum_ok():
    return _row_sum, (rand((512, 128)),)


@mutant("row_sum_ok", "the output accumulator is not zeroed on the first visit", row_sum_ref,
        kind="first-visit", words=("outputs", "program (0,)"))
def row_sum_no_init():
    return functools.partial(_row_sum, kernel=functools.partial(_row_sum_kernel, init=False)), \
        (rand((512, 128)),)


@mutant("row_sum_ok", "the reduction axis is marked parallel", row_sum_ref,
        finding="parallel-write-conflict")
def row_sum_reduction_parallel():
    return functools.partial(_row_sum, semantics=("parallel",)), (rand((512, 128)),)


# -- a loop inside the body ------------------------------------------------------------------

def chunk_sum_ref(x):
    return x.reshape(x.shape[0], -1, 128).sum(1)


def _chunk_sum(x, *, stop=0):
    chunks = x.shape[1] // 128

    def kernel(x_ref, o_ref):
        def body(c, acc):
            return acc + x_ref[:, pl.ds(pl.multiple_of(c * 128, 128), 128)]

        o_ref[...] = jax.lax.fori_loop(0, chunks - stop, body, jnp.zeros((8, 128)))

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0], 128), x.dtype),
        grid=(x.shape[0] // 8,), in_specs=[pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x)


@original(chunk_sum_ref)
def chunk_sum_ok():
    return _chunk_sum, (rand((32, 512)),)


@mutant("chunk_sum_ok", "the loop stops one chunk early", chunk_sum_ref,
        kind="line", words=(f"all last written by {line_of(__file__, '= jax.lax.fori_loop(0')}",))
def chunk_sum_loop_off_by_one():
    return functools.partial(_chunk_sum, stop=1), (rand((32, 512)),)


# -- scalar prefetch ---------------------------------------------------------------------------

def gather_ref(idx, x):
    return x.reshape(-1, 8, x.shape[1])[idx].reshape(-1, x.shape[1])


def _gather(idx, x, *, pick=lambda i, idx_ref: (idx_ref[i], 0)):
    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8 * idx.shape[0], x.shape[1]), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(idx.shape[0],),
            in_specs=[pl.BlockSpec((8, x.shape[1]), pick)],
            out_specs=pl.BlockSpec((8, x.shape[1]), lambda i, idx_ref: (i, 0))))(idx, x)


def _gather_args():
    return jnp.array([3, 1, 2, 0, 3, 2], jnp.int32), rand((32, 128))


@original(gather_ref)
def gather_ok():
    return _gather, _gather_args()


@mutant("gather_ok", "the prefetched index is read at the wrong position", gather_ref,
        kind="index-map", words=("args[1]",), operand="args[1]")
def gather_wrong_prefetch_index():
    return functools.partial(_gather, pick=lambda i, idx_ref: (idx_ref[(i + 1) % 6], 0)), \
        _gather_args()


# -- a pl.when branch --------------------------------------------------------------------------

def scaled_ref(x):
    return x * 2.0


def _branchy(x, *, edge_scale=2.0):
    def kernel(x_ref, o_ref):
        last = pl.program_id(0) == pl.num_programs(0) - 1

        @pl.when(jnp.logical_not(last))
        def _body():
            o_ref[...] = x_ref[...] * 2.0

        @pl.when(last)
        def _edge():
            o_ref[...] = x_ref[...] * edge_scale  # the edge block's own store

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 256,),
        in_specs=[pl.BlockSpec((256,), lambda i: (i,))],
        out_specs=pl.BlockSpec((256,), lambda i: (i,)))(x)


@original(scaled_ref)
def branchy_ok():
    return _branchy, (rand((1024,)),)


@mutant("branchy_ok", "one pl.when branch scales by the wrong factor", scaled_ref,
        kind="line", words=(f"256 wrong elements, all last written by "
                            f"{line_of(__file__, 'the edge block')} in program (3,)",))
def when_branch_wrong_value():
    return functools.partial(_branchy, edge_scale=3.0), (rand((1024,)),)
