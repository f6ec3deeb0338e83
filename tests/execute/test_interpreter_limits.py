"""An interpreter that breaks inside JAX's own code on a production kernel is unavailable, in one
line naming the error and the JAX frame; it never passes for a verdict on the kernel."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab import compare, run
from pallaslab.cases import load_function
from pallaslab.execute.executors.auto import evaluate


def _copies_a_reshaped_ref(x_hbm, o_ref, buf, sem):
    copy = pltpu.make_async_copy(x_hbm.reshape(2, 4, 128), buf, sem)  # a DMA through a view
    copy.start()
    copy.wait()
    o_ref[...] = buf[...].reshape(8, 128) * 2.0


def _reshaped_copy(x):
    return pl.pallas_call(
        _copies_a_reshaped_ref, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM((2, 4, 128), jnp.float32), pltpu.SemaphoreType.DMA])(x)


def test_an_interpreter_that_breaks_in_its_own_code_says_so_in_one_line():
    """TPU interpret mode follows only indexers on a DMA's refs (loads and stores through a
    view are rewritten for it, `model/_jax/ref_views.py`; copies are not)."""
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    result = compare(_reshaped_copy, x, executors="interpret,tpu-interpret")
    assert not result.complete and not result.passed
    tpu = result.statuses["tpu-interpret"]
    assert tpu.status == "unavailable"
    assert tpu.reason.startswith("JAX's TPU interpreter (TPU interpret mode) broke inside its "
                                 "own code (AttributeError: 'ReshapeTransform' object has no "
                                 "attribute 'indices', at jax/_src/pallas/mosaic/interpret/")
    assert "not a verdict on the kernel" in tpu.reason and "\n" not in tpu.reason
    assert result.statuses["interpret"].status == "ran"
    by_default = run(_reshaped_copy, x)  # falls back from TPU interpret mode, saying why
    assert by_default.status == "ran" and "broke inside its own code" in by_default.notes[0]


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


def _copies_without_waiting(x_hbm, o_hbm, buf, sem):
    pltpu.make_async_copy(x_hbm, buf, sem).start()  # never waited on
    o_hbm[...] = buf[...] * 2.0


def _never_waited(x):
    return pl.pallas_call(
        _copies_without_waiting, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        scratch_shapes=[pltpu.VMEM(x.shape, x.dtype), pltpu.SemaphoreType.DMA])(x)


def test_a_dma_never_waited_on_runs_where_dmas_take_time_so_it_fails_not_passes():
    """Interpret mode completes a DMA as it starts: the copy that is never waited on would
    pass its run, and only the static check (`unwaited-dma`) says so. By default such a kernel
    runs under TPU interpret mode, where its data is not there yet."""
    x = np.ones((8, 128), np.float32)
    quick = compare(_never_waited, x, executors="interpret,reference", reference=lambda x: 2 * x)
    assert quick.allclose and not quick.passed  # the run alone would be a false pass
    assert [s.finding.code for s in quick.static_findings] == ["unwaited-dma"]
    result = compare(_never_waited, x, reference=lambda x: 2 * x, timeout=120)
    assert result.executors == ("tpu-interpret", "reference") and not result.passed
    assert result.notes[0].startswith(
        "executors chosen by default: tpu-interpret, reference (kernel _copies_without_waiting "
        "starts a DMA into scratch[0] at test_interpreter_limits.py:")
    assert result.notes[0].endswith("interpret mode completes a DMA as it starts, so a "
                                    "missing wait would pass unseen; TPU interpret mode "
                                    "models DMAs in flight)")


def _writes_program_0_only(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = x_ref[...]


def test_the_default_executor_finds_integer_output_no_program_wrote():
    x = np.arange(16 * 128, dtype=np.int32).reshape(16, 128)
    half = pl.pallas_call(_writes_program_0_only, grid=(2,),
                          in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))
    result = run(half, x)
    assert result.executor == "vectorized"
    [finding] = result.findings
    assert finding.code == "unwritten-output" and finding.severity == "error"
    assert "1,024 of 2,048 element(s) were written by no program under vectorized" in \
        finding.message


def test_check_names_the_wait_nothing_signals_before_anything_runs():
    from pallaslab.analysis.inspection import inspect_capture

    x = np.ones((8, 128), np.float32)
    (insp,) = inspect_capture(pallaslab.capture(_never_signalled, x))
    (error,) = [f for f in insp.findings if f.severity == "error"]
    assert error.code == "unsignalled-wait" and error.operand == "scratch[0]"
    assert "waits on scratch[0], which nothing in the kernel signals" in error.message
