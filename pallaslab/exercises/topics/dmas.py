"""Notebook 6: manual DMAs, `emit_pipeline` and a ring collective on simulated devices."""

import jax
import jax.numpy as jnp

from pallaslab.exercises.exercise import Exercise, Mistake
from pallaslab.exercises.topics._shapes import f32

SECTION = "manual DMAs, emit_pipeline and a ring collective"
DEVICES = 4  # simulated CPU devices for the collective (a worker process)


def _right_permute(x):
    return _ring_shift(x, 1, jax.device_count())


def _ring_shift(x, step, devices):
    """Device d's shard at device (d + step) % devices."""
    return jnp.roll(x.reshape(devices, -1, x.shape[1]), step, axis=0).reshape(x.shape)


def _blocks_transposed(y, block=(8, 128)):
    """y with block (i, j) at (j, i), for a square grid of blocks."""
    (rows, cols), (br, bc) = y.shape, block
    blocks = y.reshape(rows // br, br, cols // bc, bc)
    return blocks.transpose(2, 1, 0, 3).reshape(y.shape)


Y_TRANSPOSED = Mistake(
    lambda x, y: x + _blocks_transposed(y),
    "your y index map inside `emit_pipeline` looks transposed: program (i, j) of the inner grid "
    "adds y's block (j, i); it needs block (i, j), `lambda i, j: (i, j)`")
TO_THE_LEFT = Mistake(
    lambda x: _ring_shift(x, -1, DEVICES),
    "each device sent its shard to its left neighbour, device (me - 1) % 4: the ring turns the "
    "other way, `device_id=((me + 1) % 4,)` (the right neighbour)")


DMAS = (
    Exercise(
        name="dma-copy", notebook=6, section=SECTION, title="Copy HBM to HBM with one DMA",
        signature="dma_copy(x)",
        explanation="With `pl.BlockSpec(memory_space=pl.ANY)` for the input and the output, "
                    "the kernel gets refs in HBM and no automatic copies: start a DMA with "
                    "`pltpu.make_async_copy(x_hbm, o_hbm, sem)` (sem: a "
                    "`pltpu.SemaphoreType.DMA` scratch), then wait for it.",
        stub="def dma_copy(x):\n    ...",
        reference=lambda x: x, inputs=lambda: (f32(32, 128),),
        executors=("tpu-interpret", "reference"),
        hints=("`copy = pltpu.make_async_copy(x_ref, o_ref, sem); copy.start(); copy.wait()`",)),
    Exercise(
        name="dma-chunks", notebook=6, section=SECTION,
        title="Stream chunks through VMEM and scale them", signature="dma_chunks(x)",
        explanation="x (32, 128) stays in HBM. For each of its four (8, 128) chunks: copy it "
                    "into a VMEM scratch buffer, double it there, copy it back to the output "
                    "chunk (`o_hbm.at[pl.ds(8 * c, 8)]`).",
        stub="def dma_chunks(x):\n    ...",
        reference=lambda x: 2 * x, inputs=lambda: (f32(32, 128),),
        executors=("tpu-interpret", "reference"),
        hints=("`x_hbm.at[pl.ds(8 * c, 8)]` is chunk c; loop with a Python `for c in range(4)`.",
               "Wait for each copy before reading (or overwriting) the buffer.")),
    Exercise(
        name="emit-pipeline", notebook=6, section=SECTION,
        title="A pipeline inside the kernel: emit_pipeline", signature="pipelined_add(x, y)",
        explanation="Inside a kernel whose operands stay in HBM (`pl.ANY`), "
                    "`pltpu.emit_pipeline(body, grid=(2, 2), in_specs=..., out_specs=...)` runs "
                    "body over (8, 128) blocks with its own double-buffered copies. Add x and y "
                    "(16, 256).",
        stub="def pipelined_add(x, y):\n    ...",
        reference=lambda x, y: x + y, inputs=lambda: (f32(16, 256), f32(16, 256)),
        executors=("tpu-interpret", "reference"), mistakes=(Y_TRANSPOSED,),
        hints=("The inner specs are ordinary BlockSpecs: `pl.BlockSpec((8, 128), lambda i, j: "
               "(i, j))`.",)),
    Exercise(
        name="ring-permute", notebook=6, section=SECTION,
        title="A ring step on 4 simulated devices", signature="ring_permute(x)",
        explanation="Under `jax.shard_map` over a 4-device mesh axis 'x', each device holds an "
                    "(8, 128) shard; send it to the right neighbour (device (me + 1) % 4) with "
                    "`pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, "
                    "device_id=(right,))`, start it and wait.",
        stub="def ring_permute(x):\n    ...",
        reference=_right_permute, inputs=lambda: (f32(32, 128),),
        executors=("tpu-interpret", "reference"), devices=DEVICES,
        mistakes=(TO_THE_LEFT,),
        hints=("me = jax.lax.axis_index('x'); right = jax.lax.rem(me + 1, "
               "jax.lax.axis_size('x'))",)),
)
