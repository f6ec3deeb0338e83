"""An interpreter that breaks inside JAX's own code on a production kernel is unavailable, in one
line naming the error and the JAX frame; it never passes for a verdict on the kernel."""

import jax
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab import compare, run
from pallaslab.cases import load_function
from pallaslab.execute.auto import evaluate


def test_ragged_paged_attention_interpreters_say_they_cannot_run_it():
    fn, args = load_function("tests/cases/shipped.py:tpu_ragged_paged_attention")()
    result = compare(fn, *args, executors="interpret,tpu-interpret")
    assert not result.complete and not result.passed
    tpu = result.statuses["tpu-interpret"]
    assert tpu.status == "unavailable"
    assert tpu.reason.startswith("JAX's TPU interpreter (TPU interpret mode) broke inside its "
                                 "own code (AttributeError: 'ReshapeTransform' object has no "
                                 "attribute 'indices', at jax/_src/pallas/mosaic/interpret/")
    assert "not a verdict on the kernel" in tpu.reason and "\n" not in tpu.reason
    hlo = result.statuses["interpret"]
    assert hlo.status == "unavailable" and "JAX's HLO interpreter" in hlo.reason


def _waits_for_nobody(x_ref, o_ref, sem):
    pl.semaphore_wait(sem, 1)  # nothing ever signals it
    o_ref[...] = x_ref[...] + 1.0


def _never_signalled(x):
    return pl.pallas_call(_waits_for_nobody, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(x)


def test_a_wait_nobody_signals_is_a_deadlock_by_default_not_a_pass():
    """Interpret mode runs a semaphore wait without blocking: by default a kernel that waits
    runs under TPU interpret mode, which blocks as the chip does and says deadlock."""
    x = np.ones((8, 128), np.float32)
    assert run(_never_signalled, x, executor="interpret").status == "ran"  # the false pass
    result = run(_never_signalled, x, timeout=120)
    assert result.executor == "tpu-interpret" and result.status == "failed"
    assert [f.code for f in result.findings] == ["deadlock"]
    assert result.notes[0].startswith(
        "executor chosen by default: tpu-interpret (kernel _waits_for_nobody waits on semaphore "
        "scratch[0] at test_interpreter_limits.py:")
    assert result.notes[0].endswith("interpret mode does not block on semaphore waits, so a "
                                    "missing signal would pass unseen; TPU interpret mode "
                                    "models them)")
    ev = evaluate(pallaslab.capture(_never_signalled, x), timeout=120)  # the magic's value
    assert not ev.ok and ev.executor == "tpu-interpret" and "deadlock" in str(ev.error)


def test_without_tpu_interpret_a_waiting_kernel_says_what_interpret_mode_cannot_see():
    fn, args = load_function("tests/kernels.py:semaphore_read_kernel")()
    result = run(fn, *args)
    assert result.status == "ran" and result.executor == "vectorized"
    assert result.notes[0].startswith(
        "executor chosen by default: vectorized (tpu-interpret could not run it: JAX's TPU "
        "interpreter (TPU interpret mode) does not implement pl.semaphore_read")
    assert result.notes[0].endswith("ran under vectorized, which does not block on semaphore "
                                    "waits: a missing signal would not be seen)")


def test_against_a_reference_a_waiting_kernel_runs_where_waits_block():
    x = np.ones((8, 128), np.float32)
    cmp = compare(_never_signalled, x, reference=lambda x: x + 1.0, timeout=120)
    assert cmp.executors == ("tpu-interpret", "reference") and not cmp.passed
    assert cmp.notes[0].startswith("executors chosen by default: tpu-interpret, reference "
                                   "(kernel _waits_for_nobody waits on semaphore scratch[0]")
    assert "deadlock" in [f.code for f in cmp.result("tpu-interpret").findings]
