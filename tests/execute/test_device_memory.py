"""The `device` executor's memory check: a run that needs more device memory than is free is
refused before anything is put on the device, with the figures (checked here on the CPU with
the free memory given, as an accelerator's allocator would report it)."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallaslab.execute.executors.device import free_device_memory, memory_refusal
from pallaslab.execute.prepared import prepare


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def doubled(a):
    spec = pl.BlockSpec((128, 256), lambda i: (i, 0))
    return pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(8,),
                          in_specs=[spec], out_specs=spec, interpret=True)(a)


def test_a_device_run_larger_than_free_memory_is_refused_with_the_figures():
    x = jnp.ones((1024, 256), jnp.float32)  # 1 MiB in, 1 MiB out
    prepared = prepare(doubled, (x,))
    assert memory_refusal(prepared, 2 * 2**20, "NVIDIA H100 80GB HBM3") is None
    assert memory_refusal(prepared, 2**20, "NVIDIA H100 80GB HBM3") == (
        "args[0] (f32[1024,256], 1.00 MiB): the device run needs 2.00 MiB of device memory "
        "(inputs 1.00 MiB, outputs 1.00 MiB), more than the 1.00 MiB free on the NVIDIA H100 "
        "80GB HBM3; refused before the run. Use smaller arrays, or free device memory (other "
        "arrays, other processes)")
    assert free_device_memory(jax.devices("cpu")[0]) is None  # the CPU does not say
