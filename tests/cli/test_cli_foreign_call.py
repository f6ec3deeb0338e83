"""The command line on a case that launches a raw Triton custom call, not a Pallas kernel."""

from __future__ import annotations

import json

from pallaslab.cli import main

CASE = '''
import jax
import jax.numpy as jnp
from jax.extend.core import Primitive

# jax_triton's primitive, as `triton_call` binds it.
triton_kernel_call = Primitive("triton_kernel_call")
triton_kernel_call.def_abstract_eval(lambda x, **_: jax.core.ShapedArray(x.shape, x.dtype))


def add(x):
    return triton_kernel_call.bind(x, name="add_kernel", num_warps=4)


def case():
    return add, (jnp.ones((8, 128), jnp.float32),)
'''


def test_inspect_says_it_found_a_triton_call_and_not_the_cells_last_expression(tmp_path, capsys):
    path = tmp_path / "triton_case.py"
    path.write_text(CASE)
    assert main(["inspect", f"{path}:case", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["type"] == "NoKernelError"
    assert error["message"] == (
        "add(...) launched no Pallas kernel: found a Triton custom call `add_kernel`, not a "
        "Pallas kernel: pallaslab reads `pallas_call`, `pl.kernel` and `plgpu.kernel` kernels.")
