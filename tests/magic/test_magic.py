"""`%%pallas` through a real IPython InteractiveShell."""

from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from helpers import assert_one_line_usage_error, snapshot
from IPython.core.error import UsageError
from ipython_shell import ipython_shell, run

SETUP = """
from kernels import matmul, rand, elementwise_2d
import numpy as np
x = rand((256, 256)); y = rand((256, 128), seed=1)
def two(a, b):
    m = matmul(a, b, interpret=True)
    return elementwise_2d(m, m, interpret=True)
def boom(a):
    raise ValueError(f"user boom {a.shape}")
"""


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def test_cell_value_is_the_kernel_result_and_the_workbench_is_shown(shell):
    result, out = run(shell, "%%pallas\nz = x * 1\nmatmul(z, y, interpret=True)\n")
    assert result.success, result.error_in_exec
    import numpy as np
    expected = np.asarray(shell.user_ns["x"]) @ np.asarray(shell.user_ns["y"])
    np.testing.assert_allclose(np.asarray(result.result), expected, rtol=1e-4, atol=1e-3)
    texts = [o.data.get("text/plain", "") for o in out.outputs]
    assert any("Grid of kernel 0 matmul_kernel: 2 x 1 x 2" in t for t in texts), texts
    bundle = next(o.data for o in out.outputs if "Grid of kernel" in o.data.get("text/plain", ""))
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "text/html" in bundle


def test_namespace_is_touched_only_by_the_cell(shell):
    before = snapshot(shell)
    result, _ = run(shell, "%%pallas\nw = x + 1\nout = matmul(w, y, interpret=True)\n")
    assert result.success, result.error_in_exec
    after = snapshot(shell)
    assert set(after) - set(before) == {"w", "out"}
    assert all(after[k] is before[k] for k in before if k not in ("w", "out"))
    assert result.result is None  # an assignment has no value, as without the magic


def test_user_exception_surfaces_as_without_the_magic(shell):
    plain, _plain_out = run(shell, "v = 1\nboom(x)\n")
    magic, magic_out = run(shell, "%%pallas\nv = 1\nboom(x)\n")
    assert type(magic.error_in_exec) is type(plain.error_in_exec) is ValueError
    assert str(magic.error_in_exec) == str(plain.error_in_exec) == "user boom (256, 256)"
    shown = magic_out.stdout + magic_out.stderr
    assert "boom(x)" in shown and "user boom (256, 256)" in shown
    assert "pallaslab/magic" not in shown  # the magic's own frames are hidden


def test_exception_in_an_earlier_statement(shell):
    result, out = run(shell, "%%pallas\nq = 1 / 0\nmatmul(x, y)\n")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "q = 1 / 0" in out.stdout + out.stderr
    assert "q" not in shell.user_ns


@pytest.mark.parametrize(("line", "message"), [
    ("--nope", "unrecognized arguments: --nope"),
    ("--tab nosuch", "unknown tab 'nosuch'"),
    ("--chip v99", "unknown TPU chip 'v99'"),
    ("--target tpu-v1", "unknown --target 'tpu-v1'"),
    ("--kernel 5", "kernel index 5 is out of range"),
])
def test_bad_flags_are_one_line_usage_errors(shell, line, message):
    result, out = run(shell, f"%%pallas {line}\nmatmul(x, y, interpret=True)\n")
    assert_one_line_usage_error(result, out, message)


@pytest.mark.parametrize("last", ["import math", "for i in range(2):\n    pass",
                                  "def f():\n    pass", "del x2", "ann: int"])
def test_last_line_must_be_an_expression_or_assignment(shell, last):
    shell.user_ns["x2"] = 1
    result, out = run(shell, f"%%pallas\n{last}\n")
    assert_one_line_usage_error(
        result, out, "last line must be an expression or an assignment whose value launches")
    assert shell.user_ns["x2"] == 1  # nothing of the last line ran


def test_an_expression_without_kernels_is_a_usage_error(shell):
    result, _ = run(shell, "%%pallas\nx + 1\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec) == (
        "%%pallas: `x + 1` launched no Pallas kernel: tracing the cell's last line found no "
        "`pallas_call`, `pl.kernel` or `plgpu.kernel`")


def test_a_call_without_kernels_is_a_usage_error(shell):
    result, _ = run(shell, "%%pallas\nnp.add(1, 2)\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert "launched no Pallas kernel" in str(result.error_in_exec)


def test_options_reach_the_workbench(shell):
    result, out = run(shell, "%%pallas --kernel 1 --tab overview --chip v5e --target tpu-v5e\n"
                             "two(x, y)\n")
    assert result.success, result.error_in_exec
    texts = "\n".join(o.data.get("text/plain", "") for o in out.outputs)
    assert "Kernel 1: add_kernel" in texts
    assert "matmul_kernel" not in texts


def test_magic_help_documents_the_options(shell):
    doc = shell.find_cell_magic("pallas").__doc__
    for flag in ("--tab", "--chip", "--target", "--kernel"):
        assert flag in doc


def test_later_tabs_can_add_flags(shell):
    from pallaslab import magic

    magic.register_option("--probe-flag", dest="probe_flag", default=None, help="probe option")
    try:
        assert "--probe-flag" in shell.find_cell_magic("pallas").__doc__
        opts = magic._options(magic.parse_argstring(magic.PallasMagics.pallas,
                                                    "--probe-flag hello"))
        assert opts["extra"] == {"probe_flag": "hello"}
    finally:
        magic._EXTRA_OPTIONS.remove("probe_flag")


def test_gpu_flag_reaches_the_memory_tab(shell):
    from pallaslab import magic

    opts = magic._options(magic.parse_argstring(magic.PallasMagics.pallas, "--gpu"))
    assert opts["extra"] == {"gpu": True}
    assert magic._options(magic.parse_argstring(magic.PallasMagics.pallas, ""))["extra"] == {}
    assert "--gpu" in shell.find_cell_magic("pallas").__doc__
