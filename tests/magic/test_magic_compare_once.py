"""`%%pallas --compare` and `--devices` run the user's Python once, as a plain cell does (issue
24): the comparison reuses the line's capture instead of tracing the call again in the notebook.
"""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from ipython_shell import ipython_shell, plain_text, run

SETUP = """
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from kernels import rand, scale_kernel
calls = []
x = rand((256, 128))
def ref(x):
    return 2 * x
def ref_sum(x):
    return (2 * x).sum()
"""
# Defined in each cell: a new function object, so no trace JAX cached for an earlier cell
# hides a second run of its Python.
DOUBLE = """
def double(x):
    calls.append("double")
    print("tracing double")
    return pl.pallas_call(
        scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)), interpret=True)(x)
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def side_effects(shell, cell: str) -> tuple[int, int, object]:
    """(list appends, prints the user read, the result) of running `cell`."""
    shell.user_ns["calls"].clear()
    result, out = run(shell, cell)
    assert result.success, result.error_in_exec
    return len(shell.user_ns["calls"]), plain_text(out).count("tracing double"), result


@pytest.mark.parametrize(("line", "reference"), [("double(x)", "ref"),
                                               ("double(x).sum()", "ref_sum")])
@pytest.mark.parametrize("compared", [False, True])
def test_the_users_code_runs_once_as_in_a_plain_cell(shell, shown, compared, line, reference):
    import numpy as np

    flags = f"--compare interpret,reference={reference}" if compared else ""
    plain = side_effects(shell, DOUBLE + line)
    assert plain[:2] == (1, 1)
    magic = side_effects(shell, f"%%pallas {flags}\n{DOUBLE}{line}")
    assert magic[:2] == plain[:2]
    np.testing.assert_array_equal(np.asarray(magic[2].result), np.asarray(plain[2].result))
    if compared:
        (wb,) = shown
        comparison = wb.view("compare").comparison
        assert comparison.passed, comparison.verdict()


def test_a_printed_value_prints_once_and_the_function_runs_once(shell):
    appends, prints, _ = side_effects(
        shell, f"%%pallas --compare interpret,reference=ref\n{DOUBLE}print(double(x).shape)")
    assert (appends, prints) == (1, 1)


@pytest.mark.parametrize("flags", ["--devices 2", "--devices 2 --compare interpret,reference=ref"])
def test_runs_on_simulated_devices_run_the_users_code_once(shell, flags):
    appends, prints, _ = side_effects(shell, f"%%pallas {flags}\n{DOUBLE}double(x)")
    assert (appends, prints) == (1, 1)


def test_prepare_reuses_a_capture_without_tracing_again():
    import jax
    from kernels import rand

    from pallaslab.execute.prepared import output_info, prepare
    from pallaslab.execute.protocol import ExecutorError
    from pallaslab.model import capture

    ns: dict = {}
    exec("import jax\nfrom jax.experimental import pallas as pl\n"
         "from kernels import scale_kernel\ncalls = []\n" + DOUBLE, ns)
    x = rand((256, 128))
    cap = capture(ns["double"], x)
    prepared = prepare(ns["double"], (x,), captured=cap)
    assert ns["calls"] == ["double"]  # the capture's trace only
    assert prepared.capture is cap and prepared.output_info == output_info(cap)
    with pytest.raises(ExecutorError, match="concrete arrays only"):
        prepare(ns["double"], (jax.ShapeDtypeStruct(x.shape, x.dtype),), captured=cap)


def test_a_value_with_python_leaves_still_compares_with_its_reference(shell, shown):
    # The capture's outputs are the leaves the trace computed; the reference's `3` is not one.
    cell = ("%%pallas --compare interpret,reference=ref_pair\n"
            f"{DOUBLE}def pair(x):\n    return double(x), 3\n"
            "def ref_pair(x):\n    return 2 * x, 3\npair(x)")
    appends, prints, result = side_effects(shell, cell)
    assert (appends, prints) == (1, 1) and result.result[1] == 3
    (wb,) = shown
    comparison = wb.view("compare").comparison
    assert comparison.passed, comparison.verdict()
