"""Notebook 4: scalar prefetch and a grouped (MoE) matmul."""

import jax.numpy as jnp
import numpy as np

from pallaslab.exercises.exercise import Exercise
from pallaslab.exercises.topics._shapes import f32

SECTION = "scalar prefetch and grouped (MoE) matmul"

BLOCK_IDS = np.array([3, 0, 5, 1], np.int32)  # which row block of x each program gathers
SCALES = np.array([0.5, 2.0, -1.0, 3.0], np.float32)  # one scale per row block
GROUPS = np.array([0, 0, 2, 3], np.int32)  # each token block's expert (sorted, as in MoE)


def _gather(ids, x):
    return x.reshape(-1, 8, x.shape[1])[ids].reshape(-1, x.shape[1])


def _scale(s, x):
    return x * jnp.repeat(s, 8)[:, None]


def _grouped(groups, x, w):
    return jnp.concatenate([x[8 * i:8 * i + 8] @ w[g] for i, g in enumerate(groups)])


PREFETCH = (
    Exercise(
        name="gather-blocks", notebook=4, section=SECTION, title="Gather blocks by index",
        signature="gather_blocks(ids, x)",
        explanation="ids (4,) int32 says which (8, 128) row block of x (64, 128) each of 4 "
                    "programs copies. With `pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, "
                    "...)`, ids is in SMEM before the grid starts and every index map receives "
                    "it: `lambda i, ids_ref: (ids_ref[i], 0)`.",
        stub="def gather_blocks(ids, x):\n    ...",
        reference=_gather, inputs=lambda: (BLOCK_IDS, f32(64, 128)),
        hints=("The kernel takes the prefetched ref first: `kernel(ids_ref, x_ref, o_ref)`.",)),
    Exercise(
        name="scale-blocks", notebook=4, section=SECTION, title="A scale per block from SMEM",
        signature="scale_blocks(s, x)",
        explanation="s (4,) holds one scale per (8, 128) row block of x (32, 128). Prefetch s "
                    "and read `s_ref[pl.program_id(0)]` in the kernel.",
        stub="def scale_blocks(s, x):\n    ...",
        reference=_scale, inputs=lambda: (SCALES, f32(32, 128)),
        hints=("Read the scalar with the program's own index: `s_ref[pl.program_id(0)]`.",)),
    Exercise(
        name="grouped-matmul", notebook=4, section=SECTION,
        title="A grouped (MoE) matmul: each token block to its expert",
        signature="grouped_matmul(groups, x, w)",
        explanation="Tokens x (32, 128) come sorted by expert; groups (4,) names the expert of "
                    "each 8-token block; w (4, 128, 128) holds the experts' weights. Program i "
                    "multiplies token block i by `w[groups[i]]`: w's index map reads the "
                    "prefetched groups.",
        stub="def grouped_matmul(groups, x, w):\n    ...",
        reference=_grouped, inputs=lambda: (GROUPS, f32(32, 128), f32(4, 128, 128)),
        hints=("`pl.BlockSpec((None, 128, 128), lambda i, g: (g[i], 0, 0))` drops the expert "
               "axis inside the kernel.",)),
    Exercise(
        name="grouped-matmul-k", notebook=4, section=SECTION,
        title="The grouped matmul with K split", signature="grouped_matmul_k(groups, x, w)",
        explanation="Now x is (32, 256) and w (4, 256, 128): split K in two (grid (i, k)) and "
                    "accumulate, as in notebook 2.",
        stub="def grouped_matmul_k(groups, x, w):\n    ...",
        reference=_grouped, inputs=lambda: (GROUPS, f32(32, 256), f32(4, 256, 128)),
        hints=("w: `pl.BlockSpec((None, 128, 128), lambda i, k, g: (g[i], k, 0))`.",
               "Zero the output under `pl.when(pl.program_id(1) == 0)`.")),
)
