"""Notebook 2: tiled matmul and accumulators."""

from pallaslab.exercises.exercise import Exercise
from pallaslab.exercises.topics._shapes import f32

SECTION = "tiled matmul and accumulators"


def _matmul(x, y):
    return x @ y


ACCUMULATORS = (
    Exercise(
        name="matmul-one-block", notebook=2, section=SECTION, title="A matmul in one block",
        signature="matmul_one_block(x, y)",
        explanation="x is (64, 128), y is (128, 128). Without a grid, the kernel sees whole "
                    "arrays: one `jnp.dot` (or `@`) of the two refs.",
        stub="def matmul_one_block(x, y):\n    ...",
        reference=_matmul, inputs=lambda: (f32(64, 128), f32(128, 128)),
        hints=("No grid, no BlockSpecs: `pl.pallas_call(kernel, out_shape=...)`.",)),
    Exercise(
        name="matmul-tiled", notebook=2, section=SECTION, title="Tile the output: grid (i, j)",
        signature="matmul_tiled(x, y)",
        explanation="x is (16, 256), y is (256, 256), the output (16, 256) in (8, 128) blocks. "
                    "Program (i, j) needs row block i of x (all of K) and column block j of y.",
        stub="def matmul_tiled(x, y):\n    ...",
        reference=_matmul, inputs=lambda: (f32(16, 256), f32(256, 256)),
        hints=("x: `pl.BlockSpec((8, 256), lambda i, j: (i, 0))`; y: `pl.BlockSpec((256, 128), "
               "lambda i, j: (0, j))`.",)),
    Exercise(
        name="matmul-accumulate", notebook=2, section=SECTION,
        title="Split K: accumulate into the output", signature="matmul_accumulate(x, y)",
        explanation="Now split K too: grid (i, j, k) with (8, 128) x blocks and (128, 128) y "
                    "blocks. The output block (i, j) is revisited for every k: add each "
                    "partial product into it, after zeroing it on the first visit.",
        stub="def matmul_accumulate(x, y):\n    ...",
        reference=_matmul, inputs=lambda: (f32(16, 256), f32(256, 256)),
        hints=("`@pl.when(pl.program_id(2) == 0)` zeroes `o_ref` before the first `+=`.",
               "Mark k 'arbitrary': `pltpu.CompilerParams(dimension_semantics=('parallel', "
               "'parallel', 'arbitrary'))`.")),
    Exercise(
        name="matmul-scratch", notebook=2, section=SECTION,
        title="An f32 scratch accumulator", signature="matmul_scratch(x, y)",
        explanation="Accumulate in a VMEM scratch buffer (`scratch_shapes=[pltpu.VMEM((8, 128), "
                    "jnp.float32)]`) and write the output once, on the last k.",
        stub="def matmul_scratch(x, y):\n    ...",
        reference=_matmul, inputs=lambda: (f32(16, 256), f32(256, 256)),
        hints=("Zero the scratch under `pl.when(k == 0)`, add under every k, copy it to "
               "`o_ref` under `pl.when(k == pl.num_programs(2) - 1)`.",)),
)
