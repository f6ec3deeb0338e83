"""Our Triton kernels (tests/cases/triton_kernels.py, standing in for those JAX removed from
`jax.experimental.pallas.ops.gpu` in 0.12.1) compute their pure-JAX references in JAX's
interpreter, on rows that need masking as well as on the shapes the other tests use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import triton_kernels as tk
from catalog import rand


@pytest.mark.parametrize("shape", [(64, 256), (2, 3, 200)])
def test_softmax_matches_its_reference(shape):
    x = rand(shape)
    np.testing.assert_allclose(tk.softmax(x, interpret=True), tk.softmax_reference(x),
                               rtol=1e-5, atol=1e-7)


def test_attention_matches_its_reference():
    q, k, v = (rand((2, 256, 2, 64), seed=s) for s in range(3))
    got = tk.mha(q, k, v, sm_scale=0.125, interpret=True)
    np.testing.assert_allclose(got, tk.mha_reference(q, k, v, sm_scale=0.125),
                               rtol=1e-4, atol=1e-5)
    h = [a.astype(jnp.float16) for a in (q, k, v)]
    got = tk.mha(*h, interpret=True)
    assert got.dtype == jnp.float16
    np.testing.assert_allclose(got.astype(np.float32),
                               tk.mha_reference(*h).astype(np.float32), atol=2e-2)


@pytest.mark.parametrize("shape", [(2, 32, 256), (37, 100)])
def test_layer_norm_and_its_gradients_match_the_reference(shape):
    x, w, b = rand(shape), rand(shape[-1:], seed=1), rand(shape[-1:], seed=2)
    np.testing.assert_allclose(tk.layer_norm(x, w, b, interpret=True),
                               tk.layer_norm_reference(x, w, b), rtol=1e-5, atol=1e-5)

    def grads(layer_norm):
        return jax.grad(lambda *a: jnp.sum(layer_norm(*a) ** 2), argnums=(0, 1, 2))(x, w, b)

    got = grads(lambda *a: tk.layer_norm(*a, interpret=True))
    for g, want in zip(got, grads(tk.layer_norm_reference), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
