"""The VMEM model on what production kernels exposed (issue 16): the overflow message always
names what is largest, and the spill note sizes values as they are, not padded to 128 lanes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.vmem_findings import overflow_finding

S = jax.ShapeDtypeStruct


def _capture_one(fn, *args):
    (kernel,) = pallaslab.capture(fn, *args)
    return kernel


def _gather_rows(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] + idx_ref[0].astype(jnp.float32)


def test_an_smem_overflow_names_the_largest_smem_operand():
    def fn(idx, x):
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(2,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (i, 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)))
        return pl.pallas_call(_gather_rows, out_shape=S(x.shape, x.dtype),
                              grid_spec=grid_spec)(idx, x)

    kernel = _capture_one(fn, S((1 << 19,), jnp.int32), S((16, 128), jnp.float32))
    occ = occupancy(kernel, "v5e")
    assert occ.smem_bytes == 2 * 1024 * 1024 and occ.smem_bytes > occ.smem_capacity
    message = overflow_finding(occ).message
    assert "Largest: ." not in message
    assert "needs 2.00 MiB of SMEM" in message and "Largest: args[0] 1 x 2.00 MiB." in message


def _keyed_rows(x_ref, o_ref):
    keys = jax.lax.broadcasted_iota(jnp.int32, (128, 128, 1), 1)
    o_ref[...] = x_ref[...] + jnp.sum(keys, axis=-1).astype(jnp.float32)


def _scores(q_ref, k_ref, o_ref):
    s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32)  # 512 x 256
    o_ref[...] = jnp.sum(s, axis=-1, keepdims=True) * jnp.ones((1, 128), jnp.float32)


def test_the_spill_note_sizes_values_as_they_are():
    # tokamax's DeepSeek RoPE computes int32[128, 128, 1] values (64 KiB): padding the
    # trailing 1 to 128 lanes claimed 8 MiB, where libtpu compiles it in its 192 KiB of buffers
    def keyed(x):
        spec = pl.BlockSpec((128, 128), lambda i: (i, 0))
        return pl.pallas_call(_keyed_rows, out_shape=S(x.shape, x.dtype), grid=(2,),
                              in_specs=[spec], out_specs=spec)(x)

    assert occupancy(_capture_one(keyed, S((256, 128), jnp.float32)), "v5e").spill_note is None

    def scores(q, k):
        return pl.pallas_call(_scores, out_shape=S((512, 128), jnp.float32))(q, k)

    note = occupancy(_capture_one(scores, S((512, 128), jnp.float32),
                                  S((256, 128), jnp.float32)), "v5e").spill_note
    assert note is not None and note.startswith(
        "the kernel body computes a float32[512, 256] value (512.0 KiB)")
