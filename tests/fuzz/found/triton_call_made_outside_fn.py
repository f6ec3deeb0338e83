"""Found by the fuzzer (tests/fuzz): a Triton `pallas_call` without in_specs, made once outside
the case's function (a closure or module global), fails in pallaslab's executor worker:
"capturing the function failed in the executor worker process: ValueError: Pytree for
`in_specs` and `inputs` do not match" for every executor, while the same call runs in plain
JAX. Likely cause: the call object travels to the worker by cloudpickle, and JAX's
"no block spec" sentinel default for in_specs no longer is the sentinel there.
Reproduce: pallaslab compare tests/fuzz/found/triton_call_made_outside_fn.py:case
--executors interpret,vectorized (`interpret` and `vectorized` report failed).
"""
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

BLOCK = 32


def _add(x_ref, y_ref, o_ref):
    start = pl.program_id(0) * BLOCK
    mask = start + jnp.arange(BLOCK) < x_ref.shape[0]
    window = pl.ds(start, BLOCK)
    x = plt.load(x_ref.at[window], mask=mask, other=0.0)
    y = plt.load(y_ref.at[window], mask=mask, other=0.0)
    plt.store(o_ref.at[window], x + y, mask=mask)


def case():
    call = pl.pallas_call(_add, out_shape=jax.ShapeDtypeStruct((78,), jnp.float32), grid=(3,),
                          compiler_params=plt.CompilerParams(num_warps=4))
    return (lambda x, y: call(x, y)), (jnp.ones((78,)), jnp.ones((78,)))
