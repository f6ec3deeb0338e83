"""A `while` loop the store and line recorders cannot finish (they run in the caller's
process, on seeded operands, where no time limit can stop XLA): bounded at `MAX_TRIPS`
iterations and said, never a hang and never a pass. The kernel below counts up to its input's
first element: the real input (3.0) ends the loop, a seeded normal one never does."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import pallaslab
from pallaslab.model._jax import stores, traced_control_flow

CASE = textwrap.dedent('''
    import jax, jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plt

    def _counts_to_x(x_ref, o_ref):
        n = lax.while_loop(lambda c: c != x_ref[0, 0], lambda c: c + 1.0, 0.0)

        @pl.when(n > 0)
        def _():
            o_ref[...] = x_ref[...] + n

    def counts():
        x = jnp.full((8, 128), 3.0, jnp.float32)
        return pl.pallas_call(_counts_to_x, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=plt.CompilerParams(num_warps=4)), (x,)
''')


def _counts():
    namespace: dict = {}
    exec(CASE, namespace)  # the case file's own kernel, in this process too
    fn, (x,) = namespace["counts"]()
    return fn, x


def test_the_store_evaluator_stops_a_loop_that_never_ends_and_says_why():
    fn, x = _counts()
    eqn = pallaslab.capture(fn, x)[0].handle.eqn
    with pytest.raises(stores.NotAnalysable) as err:
        stores.evaluate_accesses(eqn, stores.sample_operands(eqn, []))
    assert str(err.value) == (
        f"a `while` loop in the body ran {traced_control_flow.MAX_TRIPS:,} iterations without "
        "ending, and pallaslab stops there rather than hang (its end may depend on values "
        "this re-run does not have)")


def test_a_loop_that_ends_is_followed_to_its_end():
    fn, x = _counts()
    eqn = pallaslab.capture(fn, x)[0].handle.eqn
    stored = stores.evaluate_accesses(eqn, [x]).stored[0]
    assert (stored.last == 0).all()  # the real input ends the loop: program 0 stores all


def test_check_says_the_loop_was_stopped_instead_of_hanging(tmp_path):
    case = tmp_path / "spins.py"
    case.write_text(CASE)
    done = subprocess.run(  # a subprocess: without the bound this would never return
        [sys.executable, "-c", "import sys; from pallaslab.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "check", "--warnings", "--target", "gpu-h100",
         f"{case}:counts"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    out = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("could not analyse the kernel's loads and stores to tell which elements each "
            "program writes: a `while` loop in the body ran 65,536 iterations without "
            "ending") in out
    assert "are not ruled out" in out


def test_a_mismatch_is_still_reported_when_its_writers_cannot_be_evaluated():
    # a wrong reference: the mismatch asks the store evaluator who wrote each element
    fn, x = _counts()
    result = pallaslab.compare(fn, x, executors="vectorized,reference", timeout=120,
                               reference=lambda x: x + 4.0)
    assert not result.allclose
    assert result.outputs[0].pairs[0].mismatch.sum() == x.size
