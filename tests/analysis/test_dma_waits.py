"""A DMA started and never waited (issue 38, item 4): `.wait()` dropped from a
`make_async_copy` whose buffer is then read ran clean under `check` and the TPU interpreter
(only a NaN mismatch showed it). Counted per semaphore over the whole body: a copy is an
`unwaited-dma` error only when no wait on its semaphore exists anywhere (any branch, loop
iteration or descriptor), so double buffering (start i+1, wait i) stays clean."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import kernels_tpu
import pytest
from catalog import catalog_line
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main

pytestmark = pytest.mark.filterwarnings("error::UserWarning:pallaslab")

HERE = Path(__file__).name
ANY = pl.BlockSpec(memory_space=pl.ANY)
F32 = jnp.float32


def _codes(fn, args, code="unwaited-dma"):
    return [f for insp in inspect_capture(pallaslab.capture(fn, *args))
            for f in insp.findings if f.code == code]


def _dropped_wait_body(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
    copy.start()  # DROPPED-WAIT
    o_ref[...] = x_vmem[...] * 2.0


def _waited_body(x_hbm, o_ref, x_vmem, sem):
    copy = pltpu.make_async_copy(x_hbm, x_vmem, sem)
    copy.start()
    copy.wait()
    o_ref[...] = x_vmem[...] * 2.0


def _tpu(body):
    def fn(x):
        return pl.pallas_call(
            body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY],
            scratch_shapes=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA(())])(x)
    return fn, (jnp.arange(8 * 128, dtype=F32).reshape(8, 128),)


def dropped_wait():
    """A case for the CLI: the copy is started, its buffer read, `.wait()` removed."""
    return _tpu(_dropped_wait_body)


def waited():
    return _tpu(_waited_body)


def test_a_started_copy_never_waited_is_an_error_naming_copy_semaphore_and_line():
    (found,) = _codes(*dropped_wait())
    line = catalog_line("# DROPPED-WAIT", HERE)
    assert found.severity == "error"
    assert found.operand == "scratch[0]"
    assert found.message.startswith(
        f"_dropped_wait_body: the DMA args[0] (x_hbm) -> scratch[0] (x_vmem) started at {line} "
        "is never waited: no wait on its semaphore scratch[1] (sem) anywhere in the body."), \
        found.message


def test_check_exits_1_on_it_and_0_with_the_wait(capsys):
    assert main(["check", f"{__file__}:dropped_wait", "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert "unwaited-dma" in {p["code"] for k in payload["kernels"] for p in k["problems"]}
    assert main(["check", f"{__file__}:waited", "--json"]) == 0, capsys.readouterr().out


def test_the_same_kernel_with_its_wait_is_clean():
    assert not _codes(*waited())


def test_double_buffering_starts_next_and_waits_current_and_is_clean():
    fn, args = kernels_tpu.manual_dma_double_buffer()
    assert not _codes(fn, args)


def _waited_through_another_descriptor(x_hbm, o_ref, x_vmem, sems):
    @pl.when(pl.program_id(0) == 0)
    def _():
        pltpu.make_async_copy(x_hbm.at[0], x_vmem.at[0], sems.at[0]).start()

    # The wait in a loop, on a descriptor of its own over the same semaphore array.
    def step(i, carry):
        pltpu.make_async_copy(x_hbm.at[i], x_vmem.at[i], sems.at[i]).wait()
        return carry

    jax.lax.fori_loop(0, 1, step, 0)
    o_ref[...] = x_vmem[0] * 2.0


def test_a_wait_in_a_loop_through_another_descriptor_counts():
    def fn(x):
        return pl.pallas_call(
            _waited_through_another_descriptor, grid=(2,),
            out_shape=jax.ShapeDtypeStruct((8, 128), F32), in_specs=[ANY],
            scratch_shapes=[pltpu.VMEM((2, 8, 128), F32), pltpu.SemaphoreType.DMA((2,))])(x)
    assert not _codes(fn, (jnp.zeros((2, 8, 128), F32),))


def test_the_catalog_s_tpu_dma_kernels_stay_clean():
    for name in ("manual_dma_double_buffer", "run_scoped_sync_copy", "mesh_kernel",
                 "core_map_kernel", "cross_core_handoff", "emit_pipeline_matmul"):
        fn, args = getattr(kernels_tpu, name)()[:2]
        assert not _codes(fn, args), name


# --- Mosaic GPU: a TMA copy whose barrier is never waited -----------------------------------


def _tma_never_waited(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)  # TMA-NO-WAIT
    o_gmem[...] = x_gmem[...] + 1.0  # x_smem is never read


def _tma_read_without_wait(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
    o_gmem[...] = x_smem[...] + 1.0


def _mgpu(body):
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((256,), F32),
                        scratch_types=[plgpu.SMEM((256,), F32), plgpu.Barrier()])


def test_a_tma_copy_whose_barrier_is_never_waited_is_an_error():
    (found,) = _codes(_mgpu(_tma_never_waited), (jnp.arange(256, dtype=F32),))
    line = catalog_line("# TMA-NO-WAIT", HERE)
    assert found.severity == "error"
    assert f"started at {line} is never waited: no wait on its barrier scoped[1] (barrier)" \
        in found.message, found.message


def test_a_tma_copy_read_before_any_wait_is_unwaited_copy_alone():
    """`unwaited-copy` already names that copy (its SMEM read in flight): not said twice."""
    args = (jnp.arange(256, dtype=F32),)
    assert not _codes(_mgpu(_tma_read_without_wait), args)
    assert _codes(_mgpu(_tma_read_without_wait), args, "unwaited-copy")
