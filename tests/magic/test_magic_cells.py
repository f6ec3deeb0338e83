"""`%%pallas` cells as a notebook author writes them, through a real IPython InteractiveShell:
a last line that prints, displays or stores the kernel's value, `:=`, NumPy scalars as block
sizes, prints from an interpreted kernel, syntax errors, kernels on earlier lines and the
flags' smaller promises. Each behaves as the plain cell does, or says what to write."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("IPython")

import numpy as np
from helpers import user_names
from IPython.core.error import UsageError
from ipython_shell import ipython_shell, plain_text, run, same

SETUP = """
import threading
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from kernels import elementwise_2d, rand
x = rand((128, 256)); y = rand((128, 256), seed=1)
bs = np.int64(64)
results = []
log = []
def add(a, b, interpret=False):  # written for TPU unless interpret=True
    return elementwise_2d(a, b, interpret=interpret)
def stash(a):  # keeps what it computes: a tracer, while the magic traces it
    out = elementwise_2d(a, a, interpret=True)
    log.append(out)
    return out
def scale_by(a, s):
    return elementwise_2d(a * s, a, interpret=True)
def dbg_kernel(x_ref, o_ref):
    pl.debug_print("program {}", pl.program_id(0))
    o_ref[...] = x_ref[...] * 2.0
def dbg(a, interpret=False):
    spec = pl.BlockSpec((64, 256), lambda i: (i, 0))
    out = pl.pallas_call(dbg_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
                         grid=(2,), in_specs=[spec], out_specs=spec, interpret=interpret)(a)
    jax.debug.print("after the kernel: {}", out[0, 0] * 0)
    return out
lock = threading.Lock()
def locked(a):  # closes over a lock, which cannot be sent to another process
    assert not lock.locked()
    return add(a, a)
def ref(a, b):
    return a + b
"""
NOTE = "pallaslab: no TPU/GPU attached: ran 1 kernel under interpret mode"


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


def plain_value(sh, line):
    result, _ = run(sh, line)
    assert result.success, result.error_in_exec
    return result.result


# --- D3: what the last line does with the kernel's value runs on the value -----------------


def test_printing_the_kernel_call_prints_the_array_as_the_plain_cell_does(shell):
    _, plain = run(shell, "print(add(x, y, interpret=True))")
    magic, out = run(shell, "%%pallas\nprint(add(x, y))")
    assert magic.success, magic.error_in_exec
    assert magic.result is None
    assert "Tracer" not in out.stdout
    assert out.stdout == f"{NOTE} (vectorized)\n{plain.stdout}"


def test_appending_the_kernel_call_stores_the_array_and_later_cells_use_it(shell):
    shell.user_ns["results"].clear()
    magic, _ = run(shell, "%%pallas\nresults.append(add(x, y))")
    assert magic.success, magic.error_in_exec
    (stored,) = shell.user_ns["results"]
    same(stored, plain_value(shell, "add(x, y, interpret=True)"))
    later, _ = run(shell, "results[0] + 1")
    assert later.success, later.error_in_exec


@pytest.mark.parametrize("line", [
    'f"max {add(x, y).max():.3f}"',
    "float(add(x, y)[0, 0])",
    "str(add(x, y)[0, :3])",
    "len(add(x, y)) * 2",
])
def test_values_formatted_or_converted_are_the_plain_cells(shell, line):
    magic, _ = run(shell, f"%%pallas\n{line}")
    assert magic.success, magic.error_in_exec
    assert "Tracer" not in str(magic.result)
    same(magic.result, plain_value(shell, line.replace("add(x, y)",
                                                            "add(x, y, interpret=True)")))


def test_display_shows_the_array(shell, shown):
    _, plain = run(shell, "display(add(x, y, interpret=True)[:2, :3])")
    magic, out = run(shell, "%%pallas\ndisplay(add(x, y)[:2, :3])")
    assert magic.success, magic.error_in_exec
    (wb,) = shown
    assert len(wb.capture) == 1
    texts = [o.data.get("text/plain", "") for o in out.outputs]  # a view's saved copy: HTML
    (array,) = [t for t in texts if "Array(" in t]
    assert array == plain.outputs[0].data["text/plain"] and "Tracer" not in array


def test_the_reference_of_a_printed_call_takes_the_calls_arguments(shell, shown):
    magic, _ = run(shell, "%%pallas --compare vectorized,reference=ref\nprint(add(x, y))")
    assert magic.success, magic.error_in_exec
    assert shown[0].view("compare").comparison.allclose


def test_a_function_that_stores_a_tracer_is_a_usage_error(shell):
    try:
        magic, out = run(shell, "%%pallas\nstash(x)")
        err = magic.error_in_exec
        assert isinstance(err, UsageError), err
        assert str(err) == (
            "%%pallas: tracing the cell's last line `stash(x)` stored JAX tracers in `log`: the "
            "line is traced once, as under jax.jit, so what it stores while tracing is not an "
            "array (a later cell using it fails with UnexpectedTracerError). Make the kernel "
            "call the last line's value (`out = f(x)`) and store it in the next cell "
            "(`log.append(out)`); rebuild `log` first")
        assert "Traceback" not in plain_text(out)
    finally:
        shell.user_ns["log"].clear()


@pytest.mark.filterwarnings("ignore:Python iterable type:DeprecationWarning")  # JAX's, on it
def test_a_lazy_iterator_consumed_after_the_trace_is_a_usage_error(shell):
    shell.user_ns["acc"] = []
    try:
        magic, _ = run(shell, "%%pallas\nacc.extend(iter(add(x, y)))")
        assert isinstance(magic.error_in_exec, UsageError), magic.error_in_exec
        assert "stored JAX tracers in `acc`" in str(magic.error_in_exec)
    finally:
        del shell.user_ns["acc"]


# --- D4: `:=` -------------------------------------------------------------------------------


def test_a_walrus_around_the_kernel_call_binds_as_in_the_plain_cell(shell):
    shell.user_ns.pop("out", None)
    magic, _ = run(shell, "%%pallas\n(out := add(x, y)).sum()")
    assert magic.success, magic.error_in_exec
    expected = plain_value(shell, "add(x, y, interpret=True)")
    same(shell.user_ns["out"], expected)
    same(magic.result, plain_value(shell, "expected_sum = add(x, y, interpret=True)\n"
                                                 "expected_sum.sum()"))


def test_a_walrus_inside_the_traced_call_is_a_usage_error(shell):
    before = user_names(shell)
    magic, _ = run(shell, "%%pallas\njnp.sum(part := add(x, y))")
    err = magic.error_in_exec
    assert isinstance(err, UsageError), err
    assert str(err) == (
        "%%pallas: `part := ...` in the cell's last line would bind `part` inside the traced "
        "expression, not in the notebook; assign it instead: `part = add(x, y)` as the last "
        "line, and use `part` in the next cell")
    assert user_names(shell) == before


# --- D5: NumPy scalars --------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "add2(x, y, block=(bs, 128), interpret=True)",
    "add2(x, y, block=(bs, 128), interpret=True).sum()",
    "scale_by(x, np.float32(2.0))",
    "scale_by(x, np.float32(2.0)).sum()",
])
def test_numpy_scalars_behave_as_in_the_plain_cell(shell, shown, line):
    shell.user_ns["add2"] = shell.user_ns["elementwise_2d"]
    magic, _ = run(shell, f"%%pallas\n{line}")
    assert magic.success, magic.error_in_exec
    same(magic.result, plain_value(shell, line))
    if "bs" in line:
        assert shown[0].capture[0].grid == (2, 2)


def test_inspect_takes_a_numpy_block_size_as_static():
    from kernels import elementwise_2d, rand

    import pallaslab

    a = rand((128, 256))
    wb = pallaslab.inspect(elementwise_2d, a, a, block=(np.int64(64), 128), interpret=True)
    assert wb.capture[0].grid == (2, 2)
    assert wb.capture[0].inputs[0].block_shape == (64, 128)


# --- D7, D8: the value's interpreted run -----------------------------------------------------


def test_prints_of_an_interpreted_tpu_kernel_appear_as_in_the_plain_cell(shell):
    _, plain = run(shell, "dbg(x, interpret=True);")
    magic, out = run(shell, "%%pallas\ndbg(x);")
    assert magic.success, magic.error_in_exec
    assert magic.result is None  # `;` hides the value, as in the plain cell
    assert plain.stdout.splitlines() == ["program 0", "program 1", "after the kernel: 0.0"]
    assert out.stdout.splitlines() == [*plain.stdout.splitlines(), NOTE]


def test_a_call_that_cannot_be_sent_runs_here_and_says_so(shell):
    magic, out = run(shell, "%%pallas\nlocked(x)")
    assert magic.success, magic.error_in_exec
    same(magic.result, plain_value(shell, "add(x, x, interpret=True)"))
    assert re.search(rf"{re.escape(NOTE)} \(vectorized\); ran in the notebook's process "
                     r"\(.*lock.*\): the time limit is checked between programs only",
                     out.stdout), out.stdout


# --- D9, D10: errors -------------------------------------------------------------------------


def test_a_syntax_error_shows_what_a_plain_cell_shows(shell):
    before = user_names(shell)
    _, plain = run(shell, "w1 = 1\nadd(x, y\n")
    magic, out = run(shell, "%%pallas\nw1 = 1\nadd(x, y\n")
    assert isinstance(magic.error_in_exec, SyntaxError)
    shown = plain_text(out)
    assert "SyntaxError: '(' was never closed" in shown and "Cell In[" in shown
    assert "Traceback" not in shown and "pallaslab" not in shown and "run_cell_magic" not in shown
    assert "Traceback" not in plain_text(plain)
    assert user_names(shell) == before


def test_a_kernel_on_an_earlier_line_fails_as_written_with_a_hint(shell):
    before = user_names(shell)
    magic, out = run(shell, "%%pallas\nfirst = add(x, y)\nadd(x, y)")
    err = magic.error_in_exec
    assert type(err) is ValueError and str(err) == \
        "Only interpret mode is supported on CPU backend."
    assert err.__notes__[-1] == (
        "%%pallas inspects and interprets only the cell's last line; earlier lines run as "
        "written: put the kernel call on the last line, or pass interpret=True")
    shown = plain_text(out)
    assert "first = add(x, y)" in shown and "pallaslab/magic" not in shown
    assert user_names(shell) == before


# --- D11: flags ------------------------------------------------------------------------------


def test_help_lists_every_executor(shell):
    doc = re.sub(r"-\s+", "-", " ".join(shell.find_cell_magic("pallas").__doc__.split()))
    assert "Executors: interpret, tpu-interpret, gpu-interpret, vectorized, device, " \
           "reference=NAME" in doc


@pytest.mark.parametrize("quoted", ["'interpret, reference=ref'", '"interpret,reference=ref"'])
def test_a_quoted_compare_flag_is_read_without_its_quotes(shell, shown, quoted):
    magic, _ = run(shell, f"%%pallas --compare {quoted}\nadd(x, y, interpret=True)")
    assert magic.success, magic.error_in_exec
    comparison = shown[0].view("compare").comparison
    assert comparison.executors == ("interpret", "reference") and comparison.allclose


def test_the_compare_tab_needs_compare(shell):
    magic, out = run(shell, "%%pallas --tab compare\nadd(x, y, interpret=True)")
    assert isinstance(magic.error_in_exec, UsageError)
    assert str(magic.error_in_exec) == (
        "%%pallas: --tab compare needs --compare EXECUTORS, e.g. --compare "
        "interpret,reference=my_ref: the Compare tab shows that comparison")
    assert "Traceback" not in plain_text(out)
