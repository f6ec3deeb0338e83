"""`%%pallas --compare EXECUTORS` through a real IPython InteractiveShell."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("IPython")

from helpers import assert_one_line_usage_error
from ipython_shell import ipython_shell, run

SETUP = """
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from kernels import elementwise_2d, rand, scale_kernel
def wrong_kernel(x):  # the catalog's shifted_block_wrong, runnable on the CPU
    return pl.pallas_call(
        scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((64, 128), lambda i: (jnp.where(i == 2, 3, i), 0))],
        out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)), interpret=True)(x)
x = rand((256, 128))
a = rand((128, 256)); b = rand((128, 256), seed=1)
"""
CELL = """%%pallas --compare interpret,reference=my_ref
def my_ref(x):
    return 2 * x
wrong_kernel(x)
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def test_compare_flag_opens_the_compare_tab_on_the_wrong_program(shell, shown):
    import numpy as np

    result, out = run(shell, CELL)
    assert result.success, result.error_in_exec
    np.testing.assert_array_equal(np.asarray(result.result)[:128],
                                  2 * np.asarray(shell.user_ns["x"])[:128])
    (wb,) = shown
    assert wb.initial_tab == "compare"
    assert "compare" in [t.name for t in wb.tabs()]
    view = wb.view("compare")
    assert view.comparison.executors == ("interpret", "reference")
    text = view.to_text()
    assert "scale_kernel: MISMATCH" in text
    assert re.search(r"interpret vs reference +\(2, 0\) +\(2,\)", text), text  # block, writers
    texts = "\n".join(o.data.get("text/plain", "") for o in out.outputs)
    assert re.search(r"interpret vs reference +\(2, 0\) +\(2,\)", texts), texts
    # the magic passed the user's own call: my_ref saw the array as written
    assert view.comparison.result("reference").ok
    # and the step tab can run straight to the program the comparison blamed
    step = wb.view("step").run_to_mismatch()
    assert step.stepper.program == (2,)


def test_static_arguments_still_compare(shell, shown):
    result, _ = run(shell, "%%pallas --compare interpret,reference=add\n"
                           "def add(x, y):\n    return x + y\n"
                           "elementwise_2d(a, b, block=(64, 128), interpret=True)\n")
    assert result.success, result.error_in_exec
    (wb,) = shown
    assert wb.view("compare").comparison.allclose


@pytest.mark.parametrize(("flag", "message"), [
    ("interpret", "--compare needs at least two executors"),
    ("interpret,nope", "unknown executor 'nope' in --compare"),
    ("interpret,reference", "reference needs the reference function"),
    ("interpret,reference=no_such_ref", "--compare reference=no_such_ref: no such name"),
    ("interpret,reference=x", "--compare reference=x is not callable"),
])
def test_bad_compare_flags_are_one_line_usage_errors(shell, flag, message):
    result, out = run(shell, f"%%pallas --compare {flag}\nwrong_kernel(x)\n")
    assert_one_line_usage_error(result, out, message)


def test_help_documents_the_compare_flag(shell):
    doc = shell.find_cell_magic("pallas").__doc__
    assert "--compare" in doc and "reference=" in doc


def test_a_plain_cells_step_tab_steps_in_the_worker(shell, shown):
    """Without --compare, the Step tab re-runs the user's own call in the worker process (the
    captured jaxpr cannot travel there: JAX's tracebacks do not pickle), so its time limit
    holds and a program that never ends can be stopped."""
    result, _ = run(shell, "%%pallas\nwrong_kernel(x)\n")
    assert result.success, result.error_in_exec
    wb = shown[-1]
    step = wb.view("step").step()
    assert step.error is None, step.error
    assert step.stepper.program == (0,)
    assert not [n for n in step.stepper.notes if "run in this process" in n], step.stepper.notes
    assert step.stepper._remote is not None
