"""DMA semaphores passed between `pallas_call`s (JAX's async-copy pattern: one call starts a
copy and returns its semaphore, a later one waits on it). Neither of JAX's interpreters runs
it ("nan + dma_sem", "AbstractSemaphoreTyRules has no attribute 'full'"); pallaslab's
`interpret` runs it in program order, the copy completing at the wait
(`pallaslab/model/_jax/cross_call_semaphores.py`): a correct pair compares ALL CLOSE with no
executor named, a pair whose second call never waits does not."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallaslab import capture, compare, run, step
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.model._jax.cross_call_semaphores import NOTE

ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def _start_kernel(index_ref, src_ref, src_alias_ref, dst_ref, sem):
    del src_alias_ref
    pltpu.make_async_copy(src_ref.at[index_ref[0]], dst_ref, sem).start()


def _done_kernel(src_ref, dst_ref, sem, dst_alias_ref, *, wait):
    del dst_alias_ref
    if wait:  # sized by row 0: the wait needs the copy's shape, not its source
        pltpu.make_async_copy(src_ref.at[0], dst_ref, sem).wait()


def copy_start(x, index):
    row = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)
    return pl.pallas_call(
        _start_kernel,
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), row, pltpu.SemaphoreType.DMA(())),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[ANY],
                                               out_specs=(ANY, ANY, SEM)),
        input_output_aliases={1: 0})(jnp.reshape(index, (1,)).astype(jnp.int32), x)


def copy_done(x, dst, sem, wait=True):
    return pl.pallas_call(
        functools.partial(_done_kernel, wait=wait),
        out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
        in_specs=[ANY, ANY, SEM], out_specs=ANY, input_output_aliases={1: 0})(x, dst, sem)


def one_row(mutant: str | None = None):
    """Row 2 of x copied by an async copy the next call waits for, then scaled."""
    def fn(x):
        x, dst, sem = copy_start(x, 2)
        return copy_done(x, dst, sem, wait=mutant != "no-wait") * 3.0

    x = jnp.arange(4 * 8 * 128, dtype=jnp.float32).reshape(4, 8, 128) / 7.0
    return fn, (x,), lambda x: x[2] * 3.0


def two_in_flight(mutant: str | None = None):
    """Two copies in flight at once (rows 1 and 3), waited in the opposite order."""
    def fn(x):
        x, dst1, sem1 = copy_start(x, 1)
        x, dst3, sem3 = copy_start(x, 3)
        row3 = copy_done(x, dst3, sem3)
        row1 = copy_done(x, dst1, sem1, wait=mutant != "no-wait")
        return row1 + 2.0 * row3

    x = jnp.arange(4 * 8 * 128, dtype=jnp.float32).reshape(4, 8, 128) / 5.0
    return fn, (x,), lambda x: x[1] + 2.0 * x[3]


def jitted_halves(mutant: str | None = None):
    """The start and the wait each under its own jax.jit: the semaphore crosses both."""
    start = jax.jit(lambda x: copy_start(x, 1))
    done = jax.jit(functools.partial(copy_done, wait=mutant != "no-wait"))

    def fn(x):
        return done(*start(x)) + 1.0

    x = jnp.arange(4 * 8 * 128, dtype=jnp.float32).reshape(4, 8, 128) / 3.0
    return fn, (x,), lambda x: x[1] + 1.0


KERNELS = {"one_row": one_row, "two_in_flight": two_in_flight, "jitted_halves": jitted_halves}


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_semaphore_joined_pair_compares_all_close_with_no_executor_named(name):
    fn, args, reference = KERNELS[name]()
    for result in (compare(fn, *args), compare(fn, *args, reference=reference)):
        assert result.allclose and result.passed, result.verdict()
        ran = [r for r in result.results if r.executor != "reference"]
        assert all(r.status == "ran" and NOTE in r.notes for r in ran)


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_missing_wait_in_the_second_call_is_a_mismatch(name):
    fn, args, reference = KERNELS[name]("no-wait")
    result = compare(fn, *args, reference=reference)
    assert result.complete and not result.allclose, result.verdict()
    alone = compare(fn, *args)
    assert not alone.passed, alone.verdict()


def _check_errors(name, mutant):
    fn, args, _ = KERNELS[name](mutant)
    return [[f for f in insp.findings if f.severity == "error"]
            for insp in inspect_capture(capture(fn, *args))]


@pytest.mark.parametrize("name", list(KERNELS))
def test_check_names_a_copy_whose_passed_semaphore_no_later_kernel_waits(name):
    """Followed from the kernel that returns the semaphore to the one that takes it (two
    copies in flight: the one whose waiter does not wait), or, through a `jit`, to any later
    kernel waiting on a semaphore it takes."""
    assert not any(_check_errors(name, None))  # the later kernel waits: nothing to say
    errors = _check_errors(name, "no-wait")
    found = [f for per_kernel in errors for f in per_kernel]
    assert found and {f.code for f in found} == {"unwaited-dma"}
    first = errors[0][0]
    assert first.message.startswith("_start_kernel: the DMA args[1] (src_ref) -> outputs[1] "
                                    "(dst_ref) started at ")
    assert first.message.endswith(
        "on the semaphore the kernel returns (outputs[2] (sem)) is waited by no later kernel: "
        "none waits on a DMA semaphore it takes, so the copy's destination is never known to "
        "have landed. Rule: a DMA semaphore returned by a pallas_call must be waited in a "
        "later pallas_call before the copy's destination is read.")


def test_interpret_completes_the_copy_at_the_wait_and_says_what_it_models():
    fn, args, reference = one_row()
    result = run(fn, *args, executor="interpret")
    assert result.status == "ran", result.reason
    np.testing.assert_allclose(result.outputs[0], reference(*args), rtol=1e-6)
    assert NOTE in result.notes and "not modelled" in NOTE


def test_tpu_interpret_still_says_it_cannot_run_a_passed_semaphore():
    fn, args, _ = one_row()
    result = run(fn, *args, executor="tpu-interpret")
    assert result.status == "unavailable"
    assert "nan + dma_sem" in result.reason


def _stepped_to_the_end(fn, args, kernel):
    st = step(fn, *args, kernel=kernel)
    st.step(st.programs)
    return st


@pytest.mark.parametrize("name", list(KERNELS))
def test_the_kernel_that_waits_steps_on_what_the_copy_left(name):
    """The kernels before it run as interpret runs them (the copy completes at the wait), so
    stepping the waiting kernel ends on the row the copy brought; without the wait, on the
    uninitialized destination."""
    fn, args, _ = KERNELS[name]()
    last = len(capture(fn, *args)) - 1
    st = _stepped_to_the_end(fn, args, last)
    assert st.kernel.name == "_done_kernel" and not np.isnan(st.outputs()[0]).any()
    assert any(n.startswith("a DMA semaphore passes between pallas_calls (outputs[2] (sem) of "
                            "kernel _start_kernel") for n in st.notes)
    fn, args, _ = KERNELS[name]("no-wait")
    assert np.isnan(_stepped_to_the_end(fn, args, last).outputs()[0]).all()


def test_the_waiting_kernel_steps_to_the_copied_row_and_the_starting_kernel_steps_too():
    fn, args, _ = one_row()
    x = np.asarray(args[0])
    np.testing.assert_array_equal(_stepped_to_the_end(fn, args, 1).outputs()[0], x[2])
    start = _stepped_to_the_end(fn, args, 0)  # its own copy lands as it starts, stepped
    np.testing.assert_array_equal(start.outputs()[1], x[2])


def test_the_workbench_and_compare_name_the_unwaited_passed_copy_as_check_does():
    """The finding only the whole call shows is the starting kernel's in every view."""
    import pallaslab

    fn, args, reference = one_row("no-wait")
    wb = pallaslab.inspect(fn, *args)
    assert "unwaited-dma" in {f.code for f in wb.findings}
    cmp = compare(fn, *args, reference=reference)
    assert "unwaited-dma" in {s.finding.code for s in cmp.static_findings}
    fine = pallaslab.inspect(*one_row()[:1], *one_row()[1])
    assert "unwaited-dma" not in {f.code for f in fine.findings}


def _pair_on_devices(x):
    """The pair inside shard_map: each device copies row 1 of its own shard."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))

    def body(x):
        x, dst, sem = copy_start(x, 1)
        return copy_done(x, dst, sem) * 3.0

    return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(x)


def test_a_pair_inside_shard_map_on_two_devices_compares_all_close_by_default():
    """TPU interpret mode, chosen for kernels that may talk between devices, cannot run a
    semaphore passed between calls: the HLO interpreter's executor runs them, and says why."""
    x = jnp.arange(8 * 8 * 128, dtype=jnp.float32).reshape(8, 8, 128) / 7.0
    result = compare(_pair_on_devices, x, devices=2,
                     reference=lambda x: jnp.concatenate([x[1], x[5]]) * 3.0)
    assert result.passed, result.verdict()
    assert result.executors == ("vectorized", "reference")
    assert result.notes[0].startswith(
        "executors chosen by default: vectorized, reference (JAX's TPU interpreter cannot run a "
        "DMA semaphore passed between pallas_calls (outputs[2] (sem) of kernel _start_kernel")
    alone = compare(_pair_on_devices, x, devices=2)  # no reference: the two HLO executors
    assert alone.passed and alone.notes[0].startswith(
        "executors chosen by default: vectorized, interpret (kernels inside shard_map on 2 "
        "devices may talk to each other, but tpu-interpret cannot run them (JAX's TPU "
        "interpreter cannot run a DMA semaphore passed between pallas_calls"), alone.notes
    assert alone.notes[0].endswith("): interpret runs them)")
