"""`%%pallas --compare` takes the cell's value from the comparison's run (issue 37 item 2):
the kernels run once, the value is the run of the executor the value would have run under,
and what the kernel prints reads once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

pytest.importorskip("IPython")

from ipython_shell import ipython_shell, plain_text, run

from pallaslab.execute.registry import (
    executor_of_mode,
    get_executor,
    reference_executor,
    register_executor,
)

SETUP = """
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
from kernels import rand
bodies = []  # one entry per kernel body run in this process
x = rand((8, 128))
def ref(x):
    return 2 * x
def body(x_ref, o_ref):
    jax.debug.callback(lambda: bodies.append(1))
    o_ref[...] = x_ref[...] * 2.0
def double(x, **kw):
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), **kw)(x)
def shout(x_ref, o_ref):
    pl.debug_print("kernel says {}", pl.program_id(0))
    o_ref[...] = x_ref[...] * 2.0
def loud(x, **kw):
    return pl.pallas_call(shout, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(1,),
                          **kw)(x)
"""

# how the kernel is written -> the executor whose run is the value on a CPU host, from the
# registry's data: as written (`interpret=True`) interpret mode's plain interpreter; written
# for a TPU, the CPU-preferred one of that mode
WRITTEN = {"interpret=True": lambda: executor_of_mode("hlo"),
           "": lambda: executor_of_mode("hlo", cpu=True)}


@pytest.fixture(scope="module")
def shell():
    yield from ipython_shell(SETUP)


@pytest.fixture
def counted() -> Iterator[dict[str, int]]:
    """Runs per executor: the value's executors and the reference, each replaced by a
    subclass that counts its runs in this process (the originals registered again after)."""
    runs: dict[str, int] = {}
    originals = [type(get_executor(name, reference=lambda x: x)) for name in
                 {*(w() for w in WRITTEN.values()), reference_executor()}]

    def counting(original: type) -> type:
        class Counting(original):  # type: ignore[misc, valid-type]
            spec = dataclasses.replace(original.spec, isolated=False)  # counted here

            def execute(self, prepared, deadline=None):
                runs[self.name] = runs.get(self.name, 0) + 1
                return super().execute(prepared, deadline)

        return Counting

    try:
        for original in originals:
            register_executor(counting(original))
        yield runs
    finally:
        for original in originals:
            register_executor(original)


@pytest.mark.parametrize("written", list(WRITTEN))
def test_compare_runs_the_kernels_once_and_the_value_is_the_compared_run(shell, shown, counted,
                                                                        written):
    value_executor = WRITTEN[written]()
    bodies = shell.user_ns["bodies"]
    alone, _ = run(shell, f"import pallaslab\nbodies.clear()\npallaslab.compare("
                          f"lambda x: double(x, {written}), x, executors={value_executor!r}, "
                          "reference=ref)")
    assert alone.success, alone.error_in_exec
    in_comparison, _ = len(bodies), bodies.clear()  # its run, and its analyses' evaluations
    counted.clear()
    result, out = run(shell, f"%%pallas --compare {value_executor},reference=ref\n"
                             f"double(x, {written})")
    assert result.success, result.error_in_exec
    # (an executor may hand its run to another, counted too: the bodies say how many ran)
    assert (counted[value_executor], counted[reference_executor()]) == (1, 1)
    assert len(bodies) == in_comparison  # the value ran no kernel: it is the comparison's
    comparison = shown[0].view("compare").comparison
    (expected,) = comparison.result(reference_executor()).outputs
    np.testing.assert_allclose(np.asarray(result.result), expected, rtol=1e-6)
    if not written:  # interpreted: the note says so, and whose run the value is
        assert "the value is the --compare run's" in plain_text(out)


@pytest.mark.parametrize("written", list(WRITTEN))
def test_what_the_kernel_prints_reads_once_under_compare(shell, shown, written):
    value_executor = WRITTEN[written]()
    result, out = run(shell, f"%%pallas --compare {value_executor},reference=ref\n"
                             f"loud(x, {written})")
    assert result.success, result.error_in_exec
    assert plain_text(out).count("kernel says 0") == 1


def test_a_value_executor_not_compared_computes_the_value_again(shell, shown, counted):
    # compared: only the other executor of interpret mode; the value's runs once, for it
    value_executor = WRITTEN[""]()
    counted.clear()
    other = WRITTEN["interpret=True"]()
    result, out = run(shell, f"%%pallas --compare {other},reference=ref\ndouble(x)")
    assert result.success, result.error_in_exec
    assert (counted[value_executor], counted[reference_executor()]) == (1, 1)
    assert "the value is the --compare run's" not in plain_text(out)
    np.testing.assert_allclose(np.asarray(result.result), 2 * np.asarray(shell.user_ns["x"]))
