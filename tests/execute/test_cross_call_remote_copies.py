"""JAX's `ppermute_start` / `ppermute_done`: a remote copy started in one `pallas_call` and
waited in another, inside `shard_map`. TPU interpret mode cannot run a semaphore passed between
calls, so the HLO interpreter's executor runs them (`model/_jax/remote_copies.py`): each device
is the target of exactly one copy, started by every device together. A correct pair compares
ALL CLOSE with no executor named; a missing wait or the wrong neighbour is a mismatch; copies
that leave a device with no sender are a limit of the executor, never a verdict."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from pallaslab import compare
from pallaslab.model._jax.remote_copies import NOTE

ANY = pl.BlockSpec(memory_space=pl.ANY)
SEM = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
ROWS, LANES = 8, 128


def _target(mutant):
    me, n = jax.lax.axis_index("x"), jax.lax.axis_size("x")
    if mutant == "all-to-zero":
        return 0
    return jax.lax.rem(me + (n - 1 if mutant == "left" else 1), n)


def _start_kernel(x_ref, x_alias_ref, o_ref, send_sem, recv_sem, *, mutant):
    del x_alias_ref
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id=(_target(mutant),))
    if mutant == "conditional":
        pl.when(jax.lax.axis_index("x") >= 0)(copy.start)
    else:
        copy.start()


def _done_kernel(x_ref, o_ref, send_sem, recv_sem, o_alias_ref, *, wait):
    del o_alias_ref
    if wait:  # the descriptor sizes the waits; its target is not used by them
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(0,))
        copy.wait_send()
        copy.wait_recv()


def ppermute_start(x, mutant):
    return pl.pallas_call(
        functools.partial(_start_kernel, mutant=mutant),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY], out_specs=(ANY, ANY, SEM, SEM), input_output_aliases={0: 0})(x)


def ppermute_done(x, o, send_sem, recv_sem, wait):
    return pl.pallas_call(
        functools.partial(_done_kernel, wait=wait),
        out_shape=jax.ShapeDtypeStruct(o.shape, o.dtype),
        in_specs=[ANY, ANY, SEM, SEM], out_specs=ANY,
        input_output_aliases={1: 0})(x, o, send_sem, recv_sem)


def rotated(mutant: str | None = None):
    """Each device's shard sent to its right neighbour, then doubled."""
    def fn(x):
        mesh = jax.make_mesh((jax.device_count(),), ("x",),
                             axis_types=(jax.sharding.AxisType.Auto,))

        def body(x):
            x, o, send_sem, recv_sem = ppermute_start(x, mutant)
            return ppermute_done(x, o, send_sem, recv_sem, wait=mutant != "no-wait") * 2.0

        return jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)(x)

    x = jnp.arange(4 * ROWS * LANES, dtype=jnp.float32).reshape(4 * ROWS, LANES) / 7.0
    return fn, (x,), lambda x: jnp.roll(x, ROWS, axis=0) * 2.0


def _compared(mutant=None, **kwargs):
    fn, args, reference = rotated(mutant)
    return compare(fn, *args, devices=4, reference=reference, timeout=300, **kwargs)


def test_a_remote_pair_compares_all_close_with_no_executor_named():
    result = _compared()
    assert result.passed and result.complete, result.verdict()
    assert result.notes[0].startswith("executors chosen by default: vectorized, reference "
                                      "(JAX's TPU interpreter cannot run a DMA semaphore "
                                      "passed between pallas_calls")
    assert NOTE in _compared(executors="interpret").result("interpret").notes


def test_a_missing_wait_or_the_wrong_neighbour_is_a_mismatch():
    for mutant in ("no-wait", "left"):
        result = _compared(mutant)
        assert result.complete and not result.passed, (mutant, result.verdict())


def test_a_device_nobody_copies_to_is_the_executor_s_limit_not_a_verdict():
    result = _compared("all-to-zero", executors="interpret")
    assert not result.complete and not result.passed
    why = result.statuses["interpret"].reason
    assert "targets device 0 from 4 devices" in why or "from 0 devices" in why, why
    assert "exactly one" in why


def test_a_remote_copy_started_under_pl_when_stays_with_tpu_interpret_mode():
    result = _compared("conditional", executors="interpret")
    assert not result.complete
    assert result.statuses["interpret"].reason == (
        "the HLO interpreter cannot run kernels that communicate between devices (remote DMAs, "
        "semaphore signals to a device); only when they pass a DMA semaphore between calls and "
        "every program starts its remote copies unconditionally (kernel _start_kernel)")
