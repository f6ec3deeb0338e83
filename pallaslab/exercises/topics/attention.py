"""Notebook 5: from a softmax to flash attention (an online softmax over key blocks)."""

import jax
import jax.numpy as jnp

from pallaslab.exercises.exercise import Exercise, Mistake
from pallaslab.exercises.topics._shapes import f32

SECTION = "online softmax to flash attention"


def _attention(q, k, v):
    return jax.nn.softmax(q @ k.T, axis=-1) @ v


OVER_COLUMNS = Mistake(
    lambda x: jax.nn.softmax(x.reshape(-1, 8, x.shape[1]), axis=1).reshape(x.shape),
    "each block was normalised down its columns (axis 0, the block's 8 rows): a row softmax "
    "takes the maximum and the sum over the last axis, `axis=-1, keepdims=True`")


ATTENTION = (
    Exercise(
        name="softmax-rows", notebook=5, section=SECTION, title="A row softmax",
        signature="softmax_rows(x)",
        explanation="x is (16, 128); each (8, 128) block holds whole rows. Subtract the row "
                    "maximum before `jnp.exp` (no overflow), divide by the row sum.",
        stub="def softmax_rows(x):\n    ...",
        reference=lambda x: jax.nn.softmax(x, axis=-1), inputs=lambda: (f32(16, 128),),
        mistakes=(OVER_COLUMNS,),
        hints=("Reduce over the last axis, `axis=-1, keepdims=True`.",)),
    Exercise(
        name="logsumexp-online", notebook=5, section=SECTION,
        title="An online logsumexp over column blocks", signature="logsumexp_online(x)",
        explanation="x is (16, 256) seen in (8, 128) blocks on a grid (i, k): keep the running "
                    "maximum m and the running sum l = sum(exp(x - m)) in two (8, 1) VMEM "
                    "scratch buffers; when a new block raises m, rescale l by exp(m_old - "
                    "m_new). Write m + log(l) on the last k.",
        stub="def logsumexp_online(x):\n    ...",
        reference=lambda x: jax.nn.logsumexp(x, axis=1, keepdims=True),
        inputs=lambda: (f32(16, 256),),
        hints=("Initialise m to -inf and l to 0 under `pl.when(k == 0)`.",
               "l_new = l * exp(m - m_new) + sum(exp(x - m_new))")),
    Exercise(
        name="attention-block", notebook=5, section=SECTION,
        title="Attention for one query block", signature="attention_block(q, k, v)",
        explanation="q, k, v are (32, 128). Program i takes query block i, (8, 128), and ALL "
                    "of k and v (a (32, 128) block, index map `lambda i: (0, 0)`): "
                    "softmax(q k^T) v.",
        stub="def attention_block(q, k, v):\n    ...",
        reference=_attention, inputs=lambda: (f32(32, 128), f32(32, 128), f32(32, 128)),
        rtol=1e-4,
        hints=("Every query attends to every key: k's and v's blocks do not follow i.",)),
    Exercise(
        name="flash-attention", notebook=5, section=SECTION,
        title="Flash attention: an online softmax over key blocks",
        signature="flash_attention(q, k, v)",
        explanation="Now split the keys too: grid (i, j), k and v in (8, 128) blocks. Keep m, "
                    "l (8, 1) and acc (8, 128) in VMEM scratch; rescale acc and l whenever m "
                    "grows; on the last j write acc / l.",
        stub="def flash_attention(q, k, v):\n    ...",
        reference=_attention, inputs=lambda: (f32(32, 128), f32(32, 128), f32(32, 128)),
        rtol=1e-4,
        hints=("Initialise m = -inf, l = 0, acc = 0 under `pl.when(j == 0)`.",
               "alpha = exp(m_old - m_new); acc = acc * alpha + p @ v; l = l * alpha + "
               "p.sum(-1)")),
)

__all__ = ["ATTENTION", "jnp"]
