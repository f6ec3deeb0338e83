"""JAX's own shipped Pallas kernels as cases (`pallaslab inspect tests/cases/shipped.py:NAME`).

JAX 0.12.1 removed its Triton kernels (`jax.experimental.pallas.ops.gpu`: softmax, attention,
layer_norm, ...); `gpu_softmax` and `gpu_attention` are now our own kernels written the same way,
from triton_kernels.py beside this file.
"""

import functools
import importlib

import jax
import jax.numpy as jnp
from triton_kernels import gpu_attention, gpu_softmax  # noqa: F401  (cases of this file too)


def _rand(shape, dtype=jnp.float32, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


def tpu_flash_attention():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    q = jax.ShapeDtypeStruct((2, 4, 512, 128), jnp.float32)
    sizes = fa.BlockSizes(block_q=128, block_k_major=256, block_k=128, block_b=1)
    return functools.partial(fa.flash_attention, block_sizes=sizes), (q, q, q)


def tpu_matmul():
    from jax.experimental.pallas.ops.tpu import matmul as tm

    x = jax.ShapeDtypeStruct((1024, 512), jnp.float32)
    y = jax.ShapeDtypeStruct((512, 768), jnp.float32)
    return functools.partial(tm.matmul, block_shape=(256, 256), block_k=128), (x, y)


def tpu_megablox_gmm():
    gmm = importlib.import_module("jax.experimental.pallas.ops.tpu.megablox.gmm")
    group_sizes = jnp.array([128, 0, 256, 128], jnp.int32)
    args = (_rand((512, 256)), _rand((4, 256, 256), seed=1), group_sizes)
    return functools.partial(gmm.gmm, tiling=(128, 128, 128)), args


def tpu_paged_attention():
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention

    q = _rand((2, 4, 128))
    k_pages, v_pages = _rand((4, 32, 16, 128), seed=1), _rand((4, 32, 16, 128), seed=2)
    lengths = jnp.array([40, 64], jnp.int32)
    page_indices = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
    fn = functools.partial(paged_attention, pages_per_compute_block=4)
    return fn, (q, k_pages, v_pages, lengths, page_indices)


def tpu_ragged_paged_attention():
    """Manual DMAs of KV pages into double-buffered VMEM with DMA semaphores; its block sizes
    come from a table keyed by the TPU generation, so tracing asks the chip."""
    from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa

    num_seqs, pages_per_seq, page_size, heads, head_dim = 2, 4, 16, 4, 128
    q = _rand((32, heads, head_dim))
    kv_pages = _rand((num_seqs * pages_per_seq, page_size, heads, head_dim), seed=1)
    kv_lens = jnp.array([40, 64], jnp.int32)
    page_indices = jnp.arange(num_seqs * pages_per_seq, dtype=jnp.int32).reshape(num_seqs, -1)
    cu_q_lens = jnp.array([0, 16, 32], jnp.int32)
    fn = functools.partial(rpa.ragged_paged_attention, num_kv_pages_per_block=2,
                           num_queries_per_block=16)
    return fn, (q, kv_pages, kv_lens, page_indices, cu_q_lens, jnp.array([2], jnp.int32))
