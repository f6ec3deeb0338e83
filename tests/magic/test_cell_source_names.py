"""A kernel written in a notebook cell is named as IPython's tracebacks name it, "Cell In[N]"
with the line in that cell, in the text and in every view's payload, never by the code name
IPython compiled the cell under ("<ipython-input-3-...>", "/tmp/ipykernel_1/2041743380.py")."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("IPython")

from ipython_shell import ipython_shell, record_displays, run

from pallaslab.model.source_names import short_source
from pallaslab.workbench import Workbench

SETUP = """
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
x = jnp.ones((128, 128), jnp.float32)
"""

KERNEL_CELL = """# a kernel written in the notebook

def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

def double(a):
    spec = pl.BlockSpec((64, 128), lambda i: (i, 0))
    return pl.pallas_call(double_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
                          grid=(2,), in_specs=[spec], out_specs=spec, interpret=True)(a)
"""
KERNEL_LINE, CALL_LINE = 3, 8  # of `def double_kernel` and of `pl.pallas_call` in the cell


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


@pytest.fixture(scope="module")
def kernel_cell(shell):
    """The execution count of the cell that defined the kernel (not the first cell's)."""
    run(shell, "pass")
    number = shell.execution_count
    result, _ = run(shell, KERNEL_CELL)
    assert result.success, result.error_in_exec
    return number


@pytest.fixture
def workbench(shell, kernel_cell, monkeypatch) -> Workbench:
    shown = record_displays(monkeypatch)
    result, _ = run(shell, "%%pallas\ndouble(x)")
    assert result.success, result.error_in_exec
    [wb] = [obj for obj in shown if isinstance(obj, Workbench)]
    return wb


def test_the_workbench_text_names_the_cell_and_line(workbench, kernel_cell):
    text = workbench.to_text()
    assert f"Kernel 0: double_kernel  (Cell In[{kernel_cell}]:{KERNEL_LINE})" in text
    assert "ipython-input" not in text


def test_every_view_names_the_same_cell_line(workbench, kernel_cell):
    kernel = f"Cell In[{kernel_cell}]:{KERNEL_LINE}"
    overview = workbench.overview().payload()["kernel"]
    assert (overview["source"], overview["call_site"]) == (
        kernel, f"Cell In[{kernel_cell}]:{CALL_LINE}")
    assert workbench.grid().payload()["source"] == kernel
    files = workbench.view("lowering").payload()["files"]
    assert [f["name"] for f in files] == [f"Cell In[{kernel_cell}]"]


def test_files_outside_a_notebook_keep_their_names(shell, kernel_cell, monkeypatch):
    cell_file = shell.user_ns["double_kernel"].__code__.co_filename
    assert short_source(f"{cell_file}:4") == f"Cell In[{kernel_cell}]:4"
    assert short_source("/home/me/kernels/matmul.py:12") == "matmul.py:12"
    assert short_source("/home/me/kernels/matmul.py") == "matmul.py"
    assert short_source(None) is None
    monkeypatch.delitem(sys.modules, "IPython")  # a script, the CLI or a worker process
    assert short_source(f"{cell_file}:4") == f"{cell_file}:4"


def test_ipykernel_cell_files_read_as_cells(shell, monkeypatch):
    """Jupyter's kernel compiles each cell under a temporary file ("/tmp/ipykernel_1/
    2041743380.py"), which is what the user saw before."""
    compiler = pytest.importorskip("ipykernel.compiler")
    monkeypatch.setattr(shell, "compile", compiler.XCachingCompiler())
    number = shell.execution_count
    result, _ = run(shell, KERNEL_CELL.replace("double", "triple").replace("2.0", "3.0"))
    assert result.success, result.error_in_exec
    assert shell.user_ns["triple_kernel"].__code__.co_filename.endswith(".py")
    shown = record_displays(monkeypatch)
    result, _ = run(shell, "%%pallas\ntriple(x)")
    assert result.success, result.error_in_exec
    [wb] = [obj for obj in shown if isinstance(obj, Workbench)]
    assert f"Kernel 0: triple_kernel  (Cell In[{number}]:{KERNEL_LINE})" in wb.to_text()
