"""Whole-grid tiling tables: block indices, fetch counts, HBM bytes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import kernel_of
from jax.experimental import pallas as pl
from kernels import CATALOG, rand

import pallaslab
from pallaslab.analysis.tiling import tile, tiling_unavailable_reason
from pallaslab.model import _jax


def test_matmul_tables_and_fetches_by_hand():
    k = kernel_of("matmul_f32")  # grid (4, 3, 2): i, j, k with k fastest
    t = tile(k)
    assert t.programs == 24
    x, y, out = (t.operands[o] for o in ("args[0]", "args[1]", "outputs"))
    assert x.block_indices[:4].tolist() == [[0, 0], [0, 1], [0, 0], [0, 1]]  # (i, k)
    assert y.block_indices[:4].tolist() == [[0, 0], [1, 0], [0, 1], [1, 1]]  # (k, j)
    assert out.block_indices[:4].tolist() == [[0, 0], [0, 0], [0, 1], [0, 1]]  # (i, j)
    # x and y change block at every step (k alternates); the output once per (i, j).
    assert (x.fetches, y.fetches, out.fetches) == (24, 24, 12)
    block = 128 * 128 * 4
    assert (x.hbm_bytes, y.hbm_bytes, out.hbm_bytes) == (24 * block, 24 * block, 12 * block)
    assert out.starts[2].tolist() == [0, 128]


def test_revisited_reduction_output_is_fetched_once():
    t = tile(kernel_of("reduction_revisited_output"))
    assert t.operands["args[0]"].fetches == 8
    assert t.operands["outputs"].fetches == 1
    assert t.operands["outputs"].fetch_mask.tolist() == [True] + [False] * 7


def test_partial_edge_blocks_are_clipped_in_hbm_bytes():
    t = tile(kernel_of("partial_blocks"))  # (200, 256) in (64, 128) blocks: grid (4, 2)
    assert t.operands["args[0]"].fetches == 8
    assert t.operands["args[0]"].hbm_bytes == 200 * 256 * 4


def test_scalar_prefetch_values_drive_the_index_map():
    fn, args = CATALOG["scalar_prefetch_gather"].case()
    (k,) = pallaslab.capture(fn, *args)
    t = tile(k)
    idx = np.asarray(args[0])
    assert t.operands["args[1]"].block_indices[:, 0].tolist() == idx.tolist()
    # [3, 1, 2, 0, 3, 3]: the last two steps revisit block 3 (no copy).
    assert t.operands["args[1]"].fetches == 5


def test_squeezed_and_vmapped_dims():
    t = tile(kernel_of("squeezed_dims"))
    assert t.operands["args[0]"].starts.tolist() == [[b, 0, 0] for b in range(4)]
    tv = tile(kernel_of("vmapped_kernel"))
    assert tv.grid == (3, 2, 2)
    assert tv.operands["args[0]"].block_indices[4].tolist() == [1, 0, 0]


def test_element_block_dims_start_at_the_element_offset():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def fn(x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct((4, 8, 128), x.dtype), grid=(4,),
            in_specs=[pl.BlockSpec((pl.Element(8), 128), lambda i: (i * 4, 0))],
            out_specs=pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
        )(x)

    (k,) = pallaslab.capture(fn, rand((64, 128)))
    t = tile(k)
    assert k.operands[0].block_dims[0].kind == "element"
    assert t.operands["args[0]"].starts[:, 0].tolist() == [0, 4, 8, 12]


@pytest.mark.parametrize("name", ["matmul_bf16", "scalar_prefetch_gather", "vmapped_kernel",
                                  "squeezed_dims", "out_of_bounds_block", "layer_norm"])
def test_vectorized_tables_equal_program_by_program_evaluation(name):
    k = kernel_of(name)
    t = tile(k)
    rng = np.random.default_rng(0)
    steps = rng.choice(t.programs, size=min(t.programs, 6), replace=False)
    for origin, ot in t.operands.items():
        for step in steps:
            program = t.program_at(int(step))
            assert tuple(ot.block_indices[step]) == _jax.eval_index_map_once(k, origin, program)


def test_program_and_step_round_trip():
    t = tile(kernel_of("matmul_f32"))
    for step in (0, 5, 23):
        assert t.step_of(t.program_at(step)) == step
    assert t.program_ids()[7].tolist() == [1, 0, 1]
    with pytest.raises(IndexError, match=r"program \(4, 0, 0\) is outside the grid \(4, 3, 2\)"):
        t.step_of((4, 0, 0))


def test_no_grid_kernel_has_one_program():
    t = tile(kernel_of("vector_add"))
    assert t.programs == 1
    assert t.operands["args[0]"].fetches == 1


def test_unavailable_when_values_are_unknown():
    k = kernel_of("scalar_prefetch_gather", concrete=False)
    assert tile(k) is None
    assert "scalar-prefetch" in tiling_unavailable_reason(k)
    mesh = kernel_of("gpu_mesh_kernel")
    assert tile(mesh) is None and "mesh kernels" in tiling_unavailable_reason(mesh)


def test_million_program_grid():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def fn(x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1024, 1024),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
            out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
        )(x)

    (k,) = pallaslab.capture(fn, jax.ShapeDtypeStruct((8192, 131072), jnp.float32))
    t = tile(k)
    assert t.programs == 1 << 20
    assert t.operands["args[0]"].fetches == 1 << 20
    assert t.operands["outputs"].block_indices[-1].tolist() == [1023, 1023]


def test_partial_application_of_library_kernel_tiles():
    from jax.experimental.pallas.ops.tpu import matmul as tm

    x = jax.ShapeDtypeStruct((512, 512), jnp.float32)
    (k,) = pallaslab.capture(functools.partial(tm.matmul, block_shape=(256, 256),
                                               block_k=256), x, x)
    t = tile(k)
    assert t.grid == (2, 2, 2)
    assert t.operands["outputs"].fetches == 4
