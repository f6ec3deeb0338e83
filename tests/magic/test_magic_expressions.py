"""`%%pallas` on any last line, through a real IPython InteractiveShell: every kernel the line
launches is captured, the user's code runs once, the value is the plain cell's, and kernels
written for a TPU run interpreted on this CPU host (one line says so)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("IPython")

import jax
import numpy as np
from helpers import snapshot
from IPython.core.error import UsageError
from ipython_shell import ipython_shell, plain_text, run, same

SETUP = """
import functools
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from kernels import elementwise_2d, matmul, pallas_double, rand, scale_kernel
x = rand((256, 256)); y = rand((256, 128), seed=1); w = rand((128, 256), seed=2)
params = {"a": rand((128, 128), seed=3), "b": rand((128, 128), seed=4)}
calls = {"n": 0}
def counted(a, b):
    calls["n"] += 1
    return matmul(a, b, interpret=True)
def add(a, b):
    return elementwise_2d(a, b, interpret=True)
def mm(a, b):
    return matmul(a, b, interpret=True)
def both(p):
    return elementwise_2d(p["a"], p["b"], interpret=True)
@jax.custom_vjp
def dbl(a):
    return elementwise_2d(a, a, interpret=True)
dbl.defvjp(lambda a: (dbl(a), None), lambda _, g: (2.0 * g,))
def loss(a):
    return jnp.sum(dbl(a) ** 2)
def tpu_loss(a):  # pallas_double is written for TPU: no interpret=True
    return jnp.sum(pallas_double(a) ** 2)
def boom(a):
    raise ValueError(f"user boom {a.shape}")
def _shout(v):
    raise ValueError("kernel boom")
def shouting_kernel(x_ref, o_ref):
    jax.debug.callback(_shout, x_ref[0, 0])
    o_ref[...] = x_ref[...] * 2.0
def spin_kernel(x_ref, o_ref):  # its one program never leaves the loop
    n = jax.lax.while_loop(lambda c: jnp.abs(x_ref[0, 0]) > -1.0, lambda c: c + 1, 0)
    o_ref[...] = x_ref[...] + n
def spinning(a):  # written for TPU: no interpret=True
    return pl.pallas_call(spin_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype))(a)
def shouting(a):  # written for TPU; fails while it runs
    return pl.pallas_call(
        shouting_kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), grid=(2,),
        in_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(a)
"""
NOTE = "pallaslab: no TPU/GPU attached: ran 1 kernel under interpret mode"


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


# --- any last expression ------------------------------------------------------------------

SHAPES = [
    ("add(x, x)", 1),
    ("add(x, x).sum()", 1),
    ("jnp.sum(add(x, x)) * 2", 1),
    ("add(x, x) + mm(x, x)", 2),
    ("jax.grad(loss)(x)", 1),
    ("mm(x, w.T)", 1),
    ("[add(a, a) for a in (x, y)]", 2),
    ("{'total': mm(x, x).sum(), 'n': 3, 'shape': add(y, y).shape}", 2),
    ("both(params)", 1),
    ("jax.jit(lambda a: add(a, a) * 2)(y)", 1),
]


@pytest.mark.parametrize(("line", "kernels"), SHAPES, ids=[s for s, _ in SHAPES])
def test_every_kernel_of_any_last_expression_is_captured_and_the_value_is_the_plain_cells(
        shell, shown, line, kernels):
    plain, _ = run(shell, line)
    assert plain.success, plain.error_in_exec
    magic, out = run(shell, f"%%pallas\n{line}\n")
    assert magic.success, magic.error_in_exec
    (wb,) = shown
    assert len(wb.capture) == kernels
    same(magic.result, plain.result)
    assert "no TPU/GPU attached" not in out.stdout  # these kernels run here as written


@pytest.mark.parametrize(("stmt", "names"), [
    ("out = add(x, x).sum()", ["out"]),
    ("p = q = mm(x, x)", ["p", "q"]),
    ("lo, hi = add(x, x).min(), add(x, x).max()", ["lo", "hi"]),
    ("acc: jax.Array = jnp.sum(mm(x, x)) * 2", ["acc"]),
    ("tot += add(y, y)", ["tot"]),
])
def test_the_last_assignment_assigns_what_the_plain_cell_assigns(shell, stmt, names):
    def fresh():
        shell.user_ns["tot"] = shell.user_ns["y"] * 0 + 1
        for n in names:
            if n != "tot":
                shell.user_ns.pop(n, None)

    fresh()
    plain, _ = run(shell, stmt)
    assert plain.success, plain.error_in_exec
    expected = {n: shell.user_ns[n] for n in names}
    fresh()
    before = snapshot(shell)
    magic, _ = run(shell, f"%%pallas\n{stmt}\n")
    assert magic.success, magic.error_in_exec
    assert magic.result is None  # an assignment has no value, as without the magic
    for n in names:
        same(shell.user_ns[n], expected[n])
    after = snapshot(shell)
    assert set(after) - set(before) <= set(names) | {"__annotations__"}
    assert all(after[k] is before[k] for k in before if k not in names)


def test_the_users_code_runs_once(shell, shown):
    for cell in ("%%pallas\ncounted(x, y)\n", "%%pallas\ncounted(x, y).sum() * 2\n",
                 "%%pallas\nz = counted(x, y) + 1\n", "%%pallas --kernel 0\ncounted(x, y)\n"):
        shell.user_ns["calls"]["n"] = 0
        result, _ = run(shell, cell)
        assert result.success, result.error_in_exec
        assert shell.user_ns["calls"]["n"] == 1, cell  # the trace is the one call


def test_the_workbench_gets_the_callers_argument_names(shell, shown):
    """options["arg_names"]: one expression per argument the trace takes (array-holding ones;
    positional in order, then keywords by name), for the views to label operands."""
    from pallaslab.analysis.inspection import caller_names

    for cell, names in (("mm(x, w.T)", ("x", "w.T")),
                        ("counted(*[x, y])", ("[x, y][0]", "[x, y][1]")),
                        ("jnp.sum(add(x, x)) * mm(x, y)", ("x", "y")),
                        ("both(params)", ("params",)),
                        ("elementwise_2d(y, y=w.T[:256, :128], block=(128, 128), "
                         "interpret=True)", ("y", "w.T[:256, :128]"))):
        result, _ = run(shell, f"%%pallas\n{cell}\n")
        assert result.success, result.error_in_exec
        wb = shown.pop()
        assert wb.options["arg_names"] == names, cell
    run(shell, "%%pallas\nmm(x, w.T)\n")
    wb = shown.pop()
    assert caller_names(wb.capture, wb.capture[0], wb.options["arg_names"]) == {
        "args[0]": "x", "args[1]": "w.T"}


# --- kernels written for TPU on this CPU host ------------------------------------------------


def test_a_tpu_kernel_runs_interpreted_on_a_cpu_host_and_says_so_once(shell, shown):
    result, out = run(shell, "%%pallas\nmatmul(x, y) * 2\n")
    assert result.success, result.error_in_exec
    assert out.stdout.count(NOTE) == 1, out.stdout
    expected, _ = run(shell, "matmul(x, y, interpret=True) * 2")
    same(result.result, expected.result)
    (wb,) = shown
    assert wb.capture[0].name == "matmul_kernel"
    texts = [o.data.get("text/plain", "") for o in out.outputs]
    assert any("Kernel 0: matmul_kernel" in t for t in texts), texts


def test_a_tpu_kernel_under_grad_and_an_assignment(shell):
    result, out = run(shell, "%%pallas\ng = jax.grad(tpu_loss)(y)\n")
    assert result.success, result.error_in_exec
    assert NOTE in out.stdout
    np.testing.assert_allclose(np.asarray(shell.user_ns["g"]), 8 * np.asarray(shell.user_ns["y"]),
                               rtol=1e-6)


def test_a_tpu_kernel_with_compare(shell, shown):
    result, out = run(shell, "%%pallas --compare interpret,reference=ref\n"
                             "def ref(a):\n    return 2 * a\npallas_double(y)\n")
    assert result.success, result.error_in_exec
    assert NOTE in out.stdout
    (wb,) = shown
    assert wb.view("compare").comparison.allclose


def test_a_failing_interpreted_run_still_shows_the_workbench(shell, shown):
    before = snapshot(shell)
    result, out = run(shell, "%%pallas\nbad = shouting(y)\n")
    err = result.error_in_exec
    from pallaslab.execute.executors.auto import InterpretedRunError

    assert isinstance(err, InterpretedRunError), err
    assert str(err) == "interpret mode run failed: ValueError: kernel boom"
    assert ("pallaslab: no TPU/GPU attached: ran 1 kernel under interpret mode, and it failed: "
            "ValueError: kernel boom") in out.stdout
    (wb,) = shown  # the workbench was shown before the cell failed
    assert wb.capture[0].name == "shouting_kernel"
    assert "bad" not in shell.user_ns
    assert snapshot(shell).keys() == before.keys()


def test_a_timed_out_interpreted_run_still_shows_the_workbench(shell, shown):
    """A kernel written for TPU spins for ever in its one program: the value's interpreted run
    goes to the killable worker process, which the time limit stops (in this process nothing
    could stop a compiled loop)."""
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails, not stalls, the suite
    try:
        result, out = run(shell, "%%pallas --timeout 3\nslow = spinning(x)\n")
    finally:
        faulthandler.cancel_dump_traceback_later()
    err = result.error_in_exec
    from pallaslab.execute.executors.auto import InterpretedRunTimeout

    assert isinstance(err, InterpretedRunTimeout) and isinstance(err, TimeoutError), err
    assert str(err) == ("interpret mode run stopped: vectorized stopped by its time limit of "
                        "3 s, while running program () of spin_kernel (1 program(s) started)")
    assert ("pallaslab: no TPU/GPU attached: 1 kernel under interpret mode (vectorized) did not "
            "finish: vectorized stopped by its time limit of 3 s, while running program () of "
            "spin_kernel") in out.stdout
    assert "ran 1 kernel" not in out.stdout
    assert len(shown) == 1 and "slow" not in shell.user_ns
    text = plain_text(out)
    assert "pallaslab/magic" not in text and "slow = spinning(x)" in text  # the user's line
    follow, _ = run(shell, "%%pallas\nmatmul(x, y)\n")  # the notebook goes on
    assert follow.success, follow.error_in_exec


# --- errors: the user's, and usage ---------------------------------------------------------


def test_a_user_exception_in_an_expression_surfaces_as_in_the_plain_cell(shell, shown):
    before = snapshot(shell)
    plain, _ = run(shell, "boom(x).sum()")
    magic, magic_out = run(shell, "%%pallas\nr = boom(x).sum()\n")
    assert type(magic.error_in_exec) is type(plain.error_in_exec) is ValueError
    assert str(magic.error_in_exec) == "user boom (256, 256)"
    shown_text = plain_text(magic_out)
    assert "r = boom(x).sum()" in shown_text and 'raise ValueError(f"user boom' in shown_text
    assert "pallaslab/magic" not in shown_text and "pallaslab/model" not in shown_text
    assert "Traceback" in shown_text
    tb = magic.error_in_exec.__traceback__
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert not any("/pallaslab/model/" in f for f in files), files
    assert not shown and "r" not in shell.user_ns
    assert snapshot(shell).keys() == before.keys()


def test_reading_array_values_in_the_last_line_says_why(shell):
    result, out = run(shell, "%%pallas\nadd(x, x) if add(x, x).sum() > 0 else x\n")
    err = result.error_in_exec
    assert isinstance(err, jax.errors.ConcretizationTypeError), err
    assert any("%%pallas traces the cell's last line once" in n for n in err.__notes__)
    assert "%%pallas traces the cell's last line once" in out.stdout + out.stderr


@pytest.mark.parametrize(("cell", "message"), [
    ("%%pallas\nnp.add(1, 2) * x\n", "%%pallas: `np.add(1, 2) * x` launched no Pallas kernel: "
     "tracing the cell's last line found no `pallas_call`, `pl.kernel` or `plgpu.kernel`"),
    ("%%pallas\n\n", "%%pallas: the cell is empty; its last line must be an expression that "
     "launches the kernel(s) to inspect, e.g. `matmul(x, y)`, `out = matmul(x, y)` or "
     "`jnp.sum(matmul(x, y)) * 2`"),
    ("%%pallas\nimport os\n", "%%pallas: the cell's last line must be an expression or an "
     "assignment whose value launches the kernel(s), e.g. `matmul(x, y)`, `out = matmul(x, y)` "
     "or `jnp.sum(matmul(x, y)) * 2`; it is `import os`"),
    ("%%pallas --timeout 0\nadd(x, x)\n",
     "%%pallas: --timeout 0: a time limit is a positive number of seconds"),
])
def test_usage_errors_are_one_line(shell, cell, message):
    before = snapshot(shell)
    result, out = run(shell, cell)
    err = result.error_in_exec
    assert isinstance(err, UsageError), err
    assert str(err) == message
    assert "Traceback" not in out.stdout + out.stderr
    assert snapshot(shell).keys() == before.keys()


def test_compare_on_an_expression_gives_the_reference_the_arrays_it_names(shell, shown):
    result, _ = run(shell, "%%pallas --compare interpret,reference=ref\n"
                           "def ref(a, b):\n    return jnp.sum(a + a) * b\n"
                           "jnp.sum(add(x, x)) * y\n")
    assert result.success, result.error_in_exec
    (wb,) = shown
    comparison = wb.view("compare").comparison
    assert comparison.result("reference").ok and comparison.allclose


def test_help_shows_the_cell_magic_usage(shell):
    doc = shell.find_cell_magic("pallas").__doc__
    assert "%%pallas [--tab NAME]" in doc
    assert not re.search(r"(?<!%)%pallas \[", doc)
    assert "the arrays the" in doc and "line names" in doc  # --compare on any expression


# --- the README tour, verbatim --------------------------------------------------------------


def tour_cells() -> list[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    tour = readme.split("## A short tour", 1)[1].split("The same from Python:", 1)[0]
    return re.findall(r"```python\n(.*?)```", tour, flags=re.S)


def test_the_readme_tour_runs_verbatim_on_a_cpu(shell, shown):
    cells = tour_cells()
    assert any(c.startswith("%%pallas") for c in cells)
    saved = dict(shell.user_ns)
    for name in [k for k in shell.user_ns if k not in shell.user_ns_hidden]:
        if not name.startswith("_"):  # a fresh notebook: nothing of SETUP is defined
            del shell.user_ns[name]
    try:
        outs = []
        for cell in cells:
            result, out = run(shell, cell)
            assert result.success, (cell, result.error_in_exec)
            outs.append(out.stdout)
        assert any(NOTE in o for o in outs)
        assert shown and all(len(wb.capture) >= 1 for wb in shown)
    finally:
        shell.user_ns.clear()
        shell.user_ns.update(saved)


def test_a_value_whose_compare_interpret_run_timed_out_is_not_computed_again():
    """Under --compare, an interpret run stopped by the time limit means computing the value
    in the notebook's process would not end either: the value is that stop."""
    from pallaslab.execute import RunResult
    from pallaslab.execute.executors.auto import InterpretedRunTimeout, stopped_in

    why = "interpret stopped by its time limit of 8 s, while running program (1,)"

    class Stopped:
        executors = ("interpret", "reference")

        def result(self, name):
            return RunResult(name, None, (), 8.0, 0.0, timed_out=why)

    evaluation = stopped_in(Stopped())
    assert isinstance(evaluation.error, InterpretedRunTimeout)
    assert evaluation.note == f"pallaslab: the value was not computed: under --compare, {why}"
    assert stopped_in(None) is None
