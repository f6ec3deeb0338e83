"""A call that launches a non-Pallas kernel: the error names what it found."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax_triton
import numpy as np
import pytest
import triton
import triton.language as tl

import pallaslab
from pallaslab.errors import NoKernelError


@triton.jit
def add_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + i, tl.load(x_ptr + i) + 1.0)


def triton_add(x):
    return jax_triton.triton_call(x, kernel=add_kernel, grid=(x.size // 128,), BLOCK=128,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype))


def ffi_add(x):
    return jax.ffi.ffi_call("my_add", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


X = jnp.ones((8, 128), np.float32)


@pytest.mark.parametrize(("fn", "found"), [
    (triton_add, "a Triton custom call `add_kernel`"),
    (ffi_add, "an FFI custom call `my_add`"),
])
def test_a_call_to_another_kind_of_kernel_says_what_it_found(fn, found):
    with pytest.raises(NoKernelError) as err:
        pallaslab.capture(fn, X)
    assert str(err.value) == (
        f"{fn.__name__}(...) launched no Pallas kernel: found {found}, not a Pallas kernel: "
        "pallaslab reads `pallas_call`, `pl.kernel` and `plgpu.kernel` kernels.")


def test_a_call_with_no_kernel_at_all_still_says_so():
    with pytest.raises(NoKernelError, match="tracing it found no `pallas_call`"):
        pallaslab.capture(jnp.sin, X)
