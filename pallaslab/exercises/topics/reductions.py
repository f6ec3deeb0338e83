"""Notebook 3: reductions and `dimension_semantics`."""

import jax.numpy as jnp

from pallaslab.exercises.exercise import Exercise
from pallaslab.exercises.topics._shapes import f32

SECTION = "reductions and dimension_semantics"

REDUCTIONS = (
    Exercise(
        name="row-sum", notebook=3, section=SECTION, title="Sum each row, block by block",
        signature="row_sum(x)",
        explanation="x is (16, 256); return its row sums as a (16, 1) array. Grid (i, k): "
                    "program (i, k) adds the sums of its (8, 128) block into output block "
                    "(i, 0), which every k revisits.",
        stub="def row_sum(x):\n    ...",
        reference=lambda x: jnp.sum(x, axis=1, keepdims=True), inputs=lambda: (f32(16, 256),),
        hints=("Output: `pl.BlockSpec((8, 1), lambda i, k: (i, 0))`.",
               "Zero `o_ref` under `pl.when(pl.program_id(1) == 0)`, then `o_ref[...] += "
               "jnp.sum(x_ref[...], axis=1, keepdims=True)`.")),
    Exercise(
        name="col-sum", notebook=3, section=SECTION,
        title="Sum each column: which axis is 'arbitrary'?", signature="col_sum(x)",
        explanation="x is (32, 256); return its column sums (1, 256). Grid (j, i) with i the "
                    "reduction axis. Tell the compiler which axis revisits the output: "
                    "`dimension_semantics=('parallel', 'arbitrary')`. On a TPU with two "
                    "cores a 'parallel' reduction axis would race.",
        stub="def col_sum(x):\n    ...",
        reference=lambda x: jnp.sum(x, axis=0, keepdims=True), inputs=lambda: (f32(32, 256),),
        hints=("The output block (1, 128) follows j only: `lambda j, i: (0, j)`.",
               "The axis that revisits an output block must be 'arbitrary'.")),
    Exercise(
        name="row-max", notebook=3, section=SECTION, title="A running maximum",
        signature="row_max(x)",
        explanation="As row-sum, but the maximum: initialise with -inf on the first visit and "
                    "combine with `jnp.maximum`.",
        stub="def row_max(x):\n    ...",
        reference=lambda x: jnp.max(x, axis=1, keepdims=True), inputs=lambda: (f32(16, 256),),
        hints=("`o_ref[...] = jnp.full_like(o_ref, -jnp.inf)` under `pl.when(k == 0)`.",)),
    Exercise(
        name="center-rows", notebook=3, section=SECTION, title="Subtract each row's mean",
        signature="center_rows(x)",
        explanation="Return x minus its row means. A program needs a whole row to know its "
                    "mean: make the block span all 256 columns, (8, 256), on a grid of 2.",
        stub="def center_rows(x):\n    ...",
        reference=lambda x: x - jnp.mean(x, axis=1, keepdims=True),
        inputs=lambda: (f32(16, 256),),
        hints=("A (8, 128) block only sees half a row: its mean is not the row's mean.",)),
)
