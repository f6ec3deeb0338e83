"""What a run says about a kernel, checked word for word: a grid with a zero dimension runs no
program (or the interpreter says in one line that it cannot); NaN output is not claimed
unwritten when a program may have stored it; a local DMA race speaks of async copies and the
kernel's only program, once; a deadlock names the semaphore as the kernel does; a mesh-form
device id (`{axis: index}`) is captured."""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import line_of
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from kernels import CATALOG

import pallaslab
from pallaslab.model._jax import deadlock
from pallaslab.model._jax.deadlock import BlockedWait, Deadlock

HERE = Path(__file__).name
ANY = pl.BlockSpec(memory_space=pl.ANY)
R, NB = 8, 4  # rows per copy, copies


def _add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def _grid_of(rows, x):
    spec = pl.BlockSpec((None, 128), lambda i, j: (i, j))
    return pl.pallas_call(_add, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(rows, 2), in_specs=[spec, spec], out_specs=spec)(x, x)


# ---------------------------------------------------------------------------- empty grids


def test_a_zero_grid_dimension_runs_no_program_under_the_default_executor():
    x = jnp.ones((16, 256), jnp.float32)
    result = pallaslab.run(functools.partial(_grid_of, 0), x, executor="vectorized")
    assert result.status == "ran", result.reason
    assert np.isnan(result.outputs[0]).all()
    assert result.notes == ("_add: no program ran (grid (0, 2) has a zero dimension): outputs "
                            "keep their fill",)
    (finding,) = result.findings
    assert finding.code == "unwritten-output" and finding.message == (
        "_add: outputs: 4,096 of 4,096 element(s) were written by no program under vectorized: "
        "they still hold its fill for uninitialised memory, NaN; no program ran: the grid "
        "(0, 2) has a zero dimension. On hardware these elements are whatever the memory held. "
        "Rule: every output element must be written by some program.")


def test_an_empty_array_with_an_empty_grid_runs_or_is_unavailable_in_one_line():
    x0 = jnp.zeros((0, 256), jnp.float32)

    def fn(x):
        return _grid_of(x.shape[0], x)

    ran = pallaslab.run(fn, x0, executor="vectorized")
    assert ran.status == "ran" and ran.outputs[0].shape == (0, 256) and not ran.findings
    tpu = pallaslab.run(fn, x0, executor="tpu-interpret")
    assert tpu.status == "unavailable" and tpu.reason == (
        "TPU interpret mode cannot run kernel _add: args[0] has the zero-size shape (0, 256), "
        "which JAX's interpreter fails to index (ValueError: Out of bound slice: start=0, "
        "dim=0); a limit of the interpreter, not a verdict on the kernel")


# ---------------------------------------------------------------- NaN output: who wrote it


def _matmul_no_zero(x_ref, y_ref, o_ref, acc_ref):
    acc_ref[...] += x_ref[...] @ y_ref[...]  # never zeroed: NaN from the scratch fill

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def _matmul(x, y):
    return pl.pallas_call(
        _matmul_no_zero, out_shape=jax.ShapeDtypeStruct((16, 256), jnp.float32),
        grid=(2, 2, 2),
        in_specs=[pl.BlockSpec((8, 64), lambda i, j, k: (i, k)),
                  pl.BlockSpec((64, 128), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x, y)


def test_nan_a_program_stored_is_not_said_to_be_written_by_no_program():
    x, y = jnp.ones((16, 128), jnp.float32), jnp.ones((128, 256), jnp.float32)
    result = pallaslab.run(_matmul, x, y, executor="interpret")
    (finding,) = [f for f in result.findings if f.code == "unwritten-output"]
    assert finding.message == (
        "_matmul_no_zero: outputs: 4,096 of 4,096 element(s) hold NaN after the run under "
        "interpret: no program wrote them (they keep the fill for uninitialised memory, NaN), "
        "or the values written were NaN (computed from uninitialised scratch or from a DMA "
        "that never landed?) in block(s) (0, 0), (0, 1), (1, 0), (1, 1); the program(s) that "
        "held those blocks last: (0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1). Rule: every output "
        "element must be written by some program, from initialised values.")
    assert finding.severity == "warning"
    assert finding.programs == ((0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1))  # the writers


def _short_loop(x_hbm, o_hbm, buf, sem):
    def step(i, carry):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * R, R)], buf, sem)
        copy.start()
        copy.wait()
        pltpu.sync_copy(buf, o_hbm.at[pl.ds(i * R, R)])
        return carry
    jax.lax.fori_loop(0, NB - 1, step, 0)  # one short: the last rows are never copied


def test_a_kernel_without_a_grid_gets_element_ranges():
    def fn(x):
        return pl.pallas_call(_short_loop, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[ANY], out_specs=ANY,
                              scratch_shapes=[pltpu.VMEM((R, 128), jnp.float32),
                                              pltpu.SemaphoreType.DMA(())])(x)

    result = pallaslab.run(fn, jnp.ones((R * NB, 128), jnp.float32), executor="tpu-interpret")
    (finding,) = [f for f in result.findings if f.code == "unwritten-output"]
    assert "1,024 of 4,096 element(s) hold NaN after the run under tpu-interpret" in \
        finding.message
    assert finding.message.endswith(
        "never landed?) in elements [24:32, :]; the kernel's only program held them. Rule: "
        "every output element must be written by some program, from initialised values.")
    assert "block (0, 0)" not in finding.message and finding.programs == ((),)


# ------------------------------------------------------------------------ local DMA races


def _double_buffered(x_hbm, o_hbm, buf, out_buf, sems, *, bug):
    def copy_in(i, slot, sem_slot=None):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * R, R)], buf.at[slot],
                                     sems.at[slot if sem_slot is None else sem_slot])
    copy_in(0, 0).start()

    def step(i, carry):
        slot = i % 2

        @pl.when(i + 1 < NB)
        def _():
            copy_in(i + 1, 1 - slot).start()  # the prefetch of the next slot
        copy_in(i, slot).wait()
        if bug == "wait_twice":
            copy_in(i, slot).wait()  # a second wait on the same copy
        src = buf[1 - slot] if bug == "wrong_slot_read" else buf[slot]  # the read
        out_buf[...] = src * 2.0
        pltpu.sync_copy(out_buf, o_hbm.at[pl.ds(i * R, R)])
        return carry
    jax.lax.fori_loop(0, NB, step, 0)


def _launch(bug, x):
    return pl.pallas_call(
        functools.partial(_double_buffered, bug=bug),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY], out_specs=ANY,
        scratch_shapes=[pltpu.VMEM((2, R, 128), jnp.float32), pltpu.VMEM((R, 128), jnp.float32),
                        pltpu.SemaphoreType.DMA((2,))])(x)


def test_a_local_dma_race_speaks_of_async_copies_once_each():
    x = jnp.ones((R * NB, 128), jnp.float32)
    result = pallaslab.run(functools.partial(_launch, "wrong_slot_read"), x,
                           executor="tpu-interpret")
    races = [f.message for f in result.findings if f.code == "data-race"]
    assert races and len(races) == len(set(races))
    start = line_of("the prefetch of the next slot", __file__)
    read = line_of("# the read", __file__)
    slot = races[0].split("write of scratch[0][")[1][0]  # the slot the prefetch writes
    assert races[0] == (
        f"_double_buffered: scratch[0]: data race in the kernel's only program: write of "
        f"scratch[0][{slot}, 0:8, 0:128] by an async copy and read of [{slot}, 0:8, 0:128] by "
        f"core 0 are not ordered. One side is an async copy: "
        "it lands at any time between its .start() and the .wait() on its semaphore. Rule: "
        "read a buffer an async copy writes only after .wait() on that copy's semaphore, and "
        "overwrite a buffer an async copy reads only after that .wait(). Lines: the write at "
        f"{HERE}:{start}, the read at {HERE}:{read}.")
    assert not any(w in " ".join(races) for w in ("remote", "neighbour", "device 0", "programs ()"))


# ------------------------------------------------------------------------------ deadlocks


def test_a_deadlock_names_the_semaphore_as_the_kernel_does_and_no_idle_core():
    x = jnp.ones((R * NB, 128), jnp.float32)
    result = pallaslab.run(functools.partial(_launch, "wait_twice"), x,
                           executor="tpu-interpret", timeout=120)
    assert result.status == "failed"
    (finding,) = [f for f in result.findings if f.code == "deadlock"]
    second = line_of("a second wait on the same copy", __file__)
    assert finding.message.startswith(
        f"the kernel is blocked for good: it waits on semaphore scratch[2][0] at "
        f"{HERE}:{second} for a count of 4096, which stays at 0. A signal or DMA that never "
        "happens (a missing signal, a second wait on the same copy, a wait for more than is "
        "sent) leaves its waiter blocked forever")
    assert "#2000" not in finding.message and "core 1" not in finding.message
    assert result.error == f"deadlock: {finding.message}"


def test_semaphore_ids_map_to_the_operands_that_hold_them():
    fn = functools.partial(_launch, "wait_twice")
    (kernel,) = pallaslab.capture(fn, jax.ShapeDtypeStruct((R * NB, 128), jnp.float32))
    assert deadlock.semaphore_names(kernel.operands) == {2000: "scratch[2][0]",
                                                        2001: "scratch[2][1]"}


def test_a_deadlock_on_several_cores_still_names_them():
    dead = Deadlock((BlockedWait(0, 0, 2001, 1, 0, "/a/k.py:7"),), 0, 1, ((0, 1),))
    assert dead.describe({2001: "scratch[0][1]"}) == (
        "every core is blocked and none can signal again: core 0 waits on semaphore "
        "scratch[0][1] at k.py:7 for a count of 1, which stays at 0; core 1 had finished. A "
        "signal that never happens (a missing signal, a wrong core_index, a wait for more than "
        "is sent) leaves its waiter blocked forever")
    assert "semaphore #2001" in dead.message  # no names known: the interpreter's id


# ----------------------------------------------------------------- mesh-form device ids


def _signal_by_mesh_coordinate(x_ref, o_ref, send_sem, recv_sem, ready):
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, jax.lax.axis_size("x"))
    pl.semaphore_signal(ready, 1, device_id={"x": right})
    pl.semaphore_wait(ready, 1)
    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                        device_id={"x": right})
    copy.start()
    copy.wait()


def test_a_device_id_given_as_a_mesh_dict_is_captured():
    def fn(x):
        mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
        kernel = pl.pallas_call(
            _signal_by_mesh_coordinate, out_shape=jax.ShapeDtypeStruct((8, 128), np.float32),
            in_specs=[ANY], out_specs=ANY,
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.REGULAR])
        return jax.shard_map(kernel, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)(x)

    (kernel,) = pallaslab.capture(fn, jax.ShapeDtypeStruct((8, 128), np.float32))
    expected = "{x: ((axis_index(x) + 1) % 1)}"  # axis_size is folded: a mesh of 1
    (signal,) = [op for op in kernel.semaphore_ops if op.kind == "signal"]
    assert signal.device and signal.device_id == expected
    (dma,) = kernel.dmas
    assert dma.kind == "remote" and dma.device_id == expected


@pytest.mark.parametrize("value", [{"x": object()}, [object()], object()])
def test_a_device_id_the_walk_cannot_read_is_a_question_mark(value):
    from pallaslab.model._jax import nested

    walk = nested._Walk(origin={})
    assert "?" in nested._expression(value, walk)


def all_gather_case():
    """A case (for `pallaslab inspect --devices 4`): JAX's own all_gather, which signals with
    `device_id={axis_name: index}`."""
    from jax.experimental.pallas.ops.tpu import all_gather

    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
    x = jnp.arange(4 * 8 * 128, dtype=jnp.float32).reshape(4 * 8, 128)
    return (lambda x: all_gather.all_gather(x, mesh=mesh, axis_name="x")), (x,)


def test_jax_all_gather_is_captured_on_four_simulated_devices(tmp_path):
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PALLASLAB_CACHE_DIR": str(tmp_path)}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pallaslab", "inspect", f"tests/execute/{HERE}:all_gather_case",
         "--devices", "4", "--json"], cwd=Path(__file__).resolve().parents[2], env=env,
        capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: error findings, not a crash
    (kernel,) = json.loads(out.stdout)["kernels"]
    assert kernel["device_mesh"]["axes"] == [["x", 4]]
    ids = [op["device_id"] for op in kernel["semaphore_ops"] if op["device"]]
    assert "{x: ((axis_index(x) + 1) % 4)}" in ids  # all_gather.py signals its right neighbour
    assert "internal error" not in out.stderr


def test_a_body_structure_pallaslab_cannot_read_is_a_warning_not_a_lost_capture(monkeypatch):
    from pallaslab.model._jax import nested

    real = nested._visit

    def visit(eqn, walk, repeated, kernel):
        if eqn.primitive.name == "dma_start":
            raise TypeError("a form of DMA this walk does not know")
        return real(eqn, walk, repeated, kernel)

    monkeypatch.setattr(nested, "_visit", visit)
    fn, args = CATALOG["manual_dma_double_buffer"].case()
    wb = pallaslab.inspect(fn, *args)
    unread = [f for f in wb.findings if f.code == "structure-unread"]
    assert unread and all(f.severity == "warning" for f in unread)
    assert unread[0].message.startswith("_double_buffered_copy: dma_start at ")
    assert unread[0].message.endswith(
        "is not described (reading it failed: TypeError: a form of DMA this walk does not "
        "know): the analysis and the views leave it out (a gap of pallaslab's, not of the "
        "kernel)")


def test_stepping_a_kernel_with_dmas_says_waits_do_not_block_there():
    fn, args = CATALOG["manual_dma_double_buffer"].case()
    [note] = pallaslab.step(fn, *args).notes
    assert note.startswith("stepping runs each program with interpret mode's semantics: every "
                           "DMA lands as it starts and no semaphore wait blocks")
    assert note.endswith("pallaslab.run and compare use TPU interpret mode, which finds them")
    fn, args = CATALOG["matmul_f32"].case()
    assert pallaslab.step(fn, *args).notes == []
