"""Notebook 1: elementwise kernels and 2-D grids."""

import jax.numpy as jnp

from pallaslab.exercises.exercise import Exercise
from pallaslab.exercises.topics._shapes import f32

SECTION = "elementwise and 2-D grids"

GRIDS = (
    Exercise(
        name="add-vectors", notebook=1, section=SECTION, title="Add two vectors, block by block",
        signature="add_vectors(x, y)",
        explanation="x and y have 1024 elements. Launch a grid of 4 programs; program i adds "
                    "elements [256*i, 256*(i+1)) with a `pl.BlockSpec((256,), lambda i: (i,))`.",
        stub="def add_vectors(x, y):\n    # pl.pallas_call(kernel, grid=..., in_specs=..., "
             "out_specs=..., out_shape=..., interpret=True)(x, y)\n    ...",
        reference=lambda x, y: x + y, inputs=lambda: (f32(1024), f32(1024)),
        hints=("The index map returns the block index, not the element offset: "
               "`lambda i: (i,)`.", "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)")),
    Exercise(
        name="scale-2d", notebook=1, section=SECTION, title="A 2-D grid: y = 2x + 1",
        signature="scale_2d(x)",
        explanation="x is (16, 256). Use (8, 128) blocks and a grid of (2, 2) programs: "
                    "program (i, j) handles block (i, j).",
        stub="def scale_2d(x):\n    ...",
        reference=lambda x: 2 * x + 1, inputs=lambda: (f32(16, 256),),
        hints=("grid=(x.shape[0] // 8, x.shape[1] // 128)",
               "`pl.BlockSpec((8, 128), lambda i, j: (i, j))` for the input and the output.")),
    Exercise(
        name="add-2d", notebook=1, section=SECTION, title="Two inputs on a 2-D grid",
        signature="add_2d(x, y)",
        explanation="Add two (16, 256) matrices with (8, 128) blocks. Both inputs and the "
                    "output must follow the same index map.",
        stub="def add_2d(x, y):\n    ...",
        reference=lambda x, y: x + y, inputs=lambda: (f32(16, 256), f32(16, 256)),
        hints=("Program (i, j) needs block (i, j) of x, of y and of the output.",)),
    Exercise(
        name="row-bias", notebook=1, section=SECTION, title="Broadcast a bias row",
        signature="row_bias(x, b)",
        explanation="x is (16, 256), b is (1, 256): return x + b. b's block is (1, 128): which "
                    "block of b does program (i, j) need?",
        stub="def row_bias(x, b):\n    ...",
        reference=lambda x, b: x + b, inputs=lambda: (f32(16, 256), f32(1, 256)),
        hints=("b has one block row: its index map is `lambda i, j: (0, j)`.",
               "Inside the kernel, `x_ref[...] + b_ref[...]` broadcasts (1, 128) over "
               "(8, 128).")),
)

__all__ = ["GRIDS", "jnp"]
