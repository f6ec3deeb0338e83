"""The command line on a case that launches a `jax_triton` Triton kernel, not a Pallas kernel."""

from __future__ import annotations

import json

from pallaslab.cli import main

CASE = '''
import jax
import jax.numpy as jnp
import jax_triton
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, o_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + i, tl.load(x_ptr + i) + 1.0)


def add(x):
    return jax_triton.triton_call(x, kernel=add_kernel, grid=(x.size // 128,), BLOCK=128,
                                  out_type=jax.ShapeDtypeStruct(x.shape, x.dtype))


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
