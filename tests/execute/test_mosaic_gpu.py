"""Mosaic GPU kernels on a CPU host (issue 12): TMA, barrier, warp-specialised and
`plgpu.emit_pipeline` kernels compare equal to their references under the default executors
(the GPU interpreter, said in the note) and step block by block; Memory lists their shared
memory, barriers and blocks per SM; Pipeline lists their TMA copies and barrier operations; a
pallas_call with Mosaic GPU params says exactly why it is shown lowered with Triton."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import kernels_mgpu
import numpy as np
import pytest
from catalog import catalog_line, rand
from helpers import workbench
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.occupancy_gpu import gpu_occupancy
from pallaslab.views.memory_gpu import mosaic_gpu_section

MOSAIC_GPU_KERNELS = ["tma_scale", "tma_blocks", "warp_specialized", "gpu_emit_pipeline"]


@pytest.mark.parametrize("name", MOSAIC_GPU_KERNELS)
def test_tma_and_barrier_kernels_match_their_references_by_default(name):
    entry = CATALOG[name]
    fn, args = entry.case()
    cmp = pallaslab.compare(fn, *args, reference=entry.reference)
    assert cmp.executors == ("gpu-interpret", "reference") and cmp.passed
    assert cmp.notes == ("executors chosen by default: gpu-interpret, reference (Mosaic GPU "
                         "kernels: gpu-interpret)",)


def test_their_smem_buffers_and_barriers_are_captured():
    fn, args = CATALOG["tma_blocks"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    assert (kernel.kind, kernel.backend, kernel.grid) == ("mesh", "mosaic_gpu", (2,))
    assert [(op.param, op.memory_space, op.shape) for op in kernel.scoped] == [
        ("x_smem", "smem", (128,)), ("barrier", "smem", ())]
    assert [op.value_type for op in kernel.scoped] == [None, "barrier"]
    # The user's own names and line, not plgpu.kernel's wrapper (`*refs`, jax/_src/...).
    assert [op.param for op in kernel.operands] == ["x_gmem", "o_gmem"]
    assert kernel.source == catalog_line("def _tma_blocks_body(", "kernels_mgpu.py").replace(
        "kernels_mgpu.py", str(Path(kernels_mgpu.__file__)))


def test_a_mosaic_gpu_pallas_call_cannot_be_lowered_and_says_what_to_write():
    fn, args = CATALOG["mosaic_gpu_pallas_call"].case()
    (result,) = pallaslab.lower(fn, *args, target="gpu-h100").kernels
    assert result.backend == "mosaic-gpu" and not result.ok
    (error,) = result.errors
    assert error.code == "mosaic-gpu-pallas-call"
    assert error.message.startswith(
        "kernel '_add_one' is a pallas_call with Mosaic GPU compiler params")
    assert "plgpu.kernel(...)" in error.message


def test_emit_pipeline_write_back_runs_by_pallaslabs_rule_and_says_so():
    """JAX's Mosaic GPU interpreter has no predicated SMEM->GMEM copy (emit_pipeline's output
    write-back): gpu-interpret runs it by pallaslab's rule, and its notes say so."""
    entry = CATALOG["gpu_emit_pipeline_out_specs"]
    fn, args = entry.case()
    cmp = pallaslab.compare(fn, *args, reference=entry.reference)
    assert cmp.executors == ("gpu-interpret", "reference") and cmp.passed
    (gpu,) = [r for r in cmp.results if r.executor == "gpu-interpret"]
    assert gpu.status == "ran" and gpu.notes == (
        "predicated SMEM->GMEM copies (emit_pipeline's output write-back) issued by "
        "pallaslab's rule: copied when the predicate holds, skipped otherwise (JAX's Mosaic "
        "GPU interpreter has none)",)


def _rows_pipeline(out_map):
    """Two blocks, each pipelining (64, 32) tiles of its 64 rows (a block's `row`) over the
    columns; `out_map(row, c)` is where step c's tile is written back."""

    def body(l_ref, r_ref, o_ref):
        def add(_, l_smem, r_smem, o_smem):
            o_smem[...] = l_smem[...] + r_smem[...]

        row = jax.lax.axis_index("rows")
        spec = plgpu.BlockSpec((64, 32), lambda c: (row, c))
        out = plgpu.BlockSpec((64, 32), lambda c: out_map(row, c))
        plgpu.emit_pipeline(add, grid=(l_ref.shape[1] // 32,), in_specs=[spec, spec],
                            out_specs=[out])(l_ref, r_ref, o_ref)

    x = rand((128, 128)).astype(jnp.float16)
    fn = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128, 128), jnp.float16), grid=(2,),
                      grid_names=("rows",))
    return fn, (x, x + 1)


def test_a_pipeline_writing_its_tiles_back_to_the_wrong_block_is_caught():
    fn, args = _rows_pipeline(lambda row, c: (row, 0))  # every tile into the first column
    cmp = pallaslab.compare(fn, *args, reference=lambda a, b: a + b)
    assert cmp.outcome == "mismatch" and not cmp.passed
    (gpu,) = [r for r in cmp.results if r.executor == "gpu-interpret"]
    assert gpu.status == "ran"  # the mutant ran: its output is what is wrong


def test_a_pipelined_kernel_steps_block_by_block():
    fn, args = _rows_pipeline(lambda row, c: (row, c))
    st = pallaslab.step(fn, *args)
    assert st.programs == 2
    want = np.asarray(args[0] + args[1], np.float32)
    assert st.step() == (0,)
    out = np.asarray(st.outputs()[0], np.float32)
    np.testing.assert_allclose(out[:64], want[:64])  # block 0 wrote its rows, all 4 tiles
    assert st.step() == (1,)
    np.testing.assert_allclose(np.asarray(st.outputs()[0], np.float32), want)


def test_blocks_step_one_by_one_and_end_equal_to_the_reference():
    entry = CATALOG["tma_blocks"]
    fn, args = entry.case()
    st = pallaslab.step(fn, *args)
    assert st.programs == 2 and st.notes == [
        "Mosaic GPU kernel _tma_blocks_body: each program is one block of its grid (block=2) "
        "(program ids = block coordinates), run alone and in order by JAX's Mosaic GPU "
        "interpreter with its own shared memory and barriers, on the whole GMEM operands the "
        "blocks before it left"]
    x = np.asarray(args[0])
    assert st.step() == (0,)
    out = st.outputs()[0]
    np.testing.assert_allclose(out[:128], x[:128] - 1.0)
    assert np.isnan(out[128:]).all()  # block 1 has not run: nothing written there yet
    assert st.blocks()["outputs"].changed and not st.blocks()["args[0]"].changed
    assert st.step() == (1,)
    np.testing.assert_allclose(st.outputs()[0], np.asarray(entry.reference(*args)))
    st.back(1)
    assert np.isnan(st.outputs()[0][128:]).all()
    with pytest.raises(NotImplementedError, match="no discharge rule"):
        st.equations()


def test_warpgroups_of_a_block_run_together_and_the_note_says_why():
    entry = CATALOG["warp_specialized"]
    fn, args = entry.case()
    st = pallaslab.step(fn, *args)
    assert st.programs == 1
    assert st.notes[0].endswith("; its 2 warpgroups (wg) run together within the block, as "
                                "threads, since they synchronise through barriers and SMEM")
    st.step()
    np.testing.assert_allclose(st.outputs()[0], np.asarray(entry.reference(*args)), rtol=1e-6)


def test_the_step_view_shows_how_blocks_run_as_a_note_not_an_error():
    view = workbench("tma_blocks").view("step")
    view.step()
    p = view.payload()
    assert p["error"] is None and p["programs"] == 2
    assert p["notes"][0].startswith("Mosaic GPU kernel _tma_blocks_body: each program is one "
                                    "block")
    assert p["notes"][-1].startswith("equations unavailable: a Mosaic GPU body cannot be "
                                     "evaluated equation by equation")
    assert "note: Mosaic GPU kernel" in view.to_text()


def test_memory_lists_shared_memory_barriers_and_blocks_per_sm():
    wb = workbench("warp_specialized")
    assert {"memory", "pipeline", "step"} <= {t.name for t in wb.tabs()}
    section = mosaic_gpu_section(wb.kernels[0])
    assert [(b["label"], b["dtype"], b["bytes"]) for b in section["buffers"]] == [
        ("x_smem", "float32", 1024), ("loaded", "barrier", 8), ("ready", "barrier", 8)]
    a100, h100, b200 = section["gpus"]
    assert a100["error"] == ("Mosaic GPU needs compute capability 9.0 or newer (TMA, mbarrier "
                             "transaction counts); a100 has 8.0")
    assert h100["shared_bytes"] == 1040 and h100["num_warps"] == 8  # 2 warpgroups
    # registers: 8 + 2 x (1024 B / 4 B / 128 threads)
    assert h100["registers"] == 12
    occ = gpu_occupancy(1040, 12, 8, "h100")
    assert (h100["blocks_per_sm"], h100["limited_by"]) == (occ.blocks_per_sm, occ.limited_by)
    assert b200["blocks_per_sm"] == occ.blocks_per_sm
    text = wb.view("memory").to_text()
    assert ["loaded", "()", "barrier", "8"] in [ln.split() for ln in text.splitlines()]
    assert "registers/thread: estimate" in text
    assert "<td>ready</td>" in wb.view("memory").to_html()


def test_emit_pipeline_buffers_are_counted_per_slot():
    section = mosaic_gpu_section(workbench("gpu_emit_pipeline").kernels[0])
    assert [(b["shape"], b["dtype"], b["bytes"]) for b in section["buffers"]] == [
        ([2], "barrier", 16), ([2, 256], "float32", 2048)]  # two slots of (256,) f32


def test_pipeline_lists_tma_copies_and_barrier_operations_in_program_order():
    text = workbench("warp_specialized").view("pipeline").to_text()
    lines = [ln.strip() for ln in text.splitlines()]
    ops = [ln.split(";")[0] for ln in lines if ln.startswith(("tma copy", "barrier"))]
    assert ops == ["tma copy", "barrier wait", "barrier arrive", "barrier wait"]
    assert any("-> x_smem (scoped[0], smem), 1,024 B; semaphore loaded" in ln for ln in lines)
    assert "TMA copies and barrier operations run as the body issues them" in text
    (copy,) = workbench("gpu_emit_pipeline").kernels[0].dmas[:1]
    assert (copy.kind, copy.shape, copy.repeated) == ("tma", (256,), True)  # one slot per copy


def test_the_pipeline_view_shows_the_recorded_tma_copies_and_barriers():
    """Mosaic GPU interpret mode's barrier log: the TMA copy landed (its barrier's phase 0),
    then the producer arrived on `ready`, for the consumer waiting on it."""
    view = workbench("warp_specialized").view("pipeline")
    recorded = view.payload()["recorded"]
    assert recorded["executor"] == "gpu-interpret"
    copy = catalog_line("plgpu.copy_gmem_to_smem(x_gmem, x_smem, loaded)", "kernels_mgpu.py")
    arrive = catalog_line("plgpu.barrier_arrive(ready)", "kernels_mgpu.py")
    wait = catalog_line("    plgpu.barrier_wait(ready)", "kernels_mgpu.py")
    # (a wait is logged only when it had to wait: the consumer may come after the arrival)
    assert recorded["lines"][:2] == [f"{copy}: 1 TMA copy, 1 barrier phase (1,024 B)",
                                     f"{arrive}: 1 barrier phase"]
    assert recorded["lines"][2:] in ([], [f"{wait}: 1 completed wait"])
    assert [(o["op"], o["source"]) for o in recorded["ops"]][:3] == [
        ("dma", copy), ("signal", copy), ("signal", arrive)]
    assert f"TMA copy args[0] (gmem) -> scoped[0] (smem), 1,024 B at {copy}" in view.to_text()


def _consumer_skips_the_wait(x_gmem, o_gmem, x_smem, loaded, ready):
    wg = jax.lax.axis_index("wg")

    @pl.when(wg == 0)
    def _producer():
        plgpu.copy_gmem_to_smem(x_gmem, x_smem, loaded)
        plgpu.barrier_wait(loaded)
        x_smem[...] = x_smem[...] * 3.0  # WRITES-SMEM
        plgpu.barrier_arrive(ready)

    @pl.when(wg == 1)
    def _consumer():
        o_gmem[...] = x_smem[...] + 1.0  # READS-SMEM (no barrier_wait(ready) first)


def test_warpgroups_racing_on_smem_are_a_data_race_every_time():
    """The consumer skips its barrier_wait: its output depends on the threads' timing (it
    may even match the reference), but the race is found by vector clocks, every run."""
    fn = plgpu.kernel(_consumer_skips_the_wait,
                      out_type=jax.ShapeDtypeStruct((256,), jnp.float32),
                      num_threads=2, thread_name="wg",
                      scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier(),
                                     plgpu.Barrier()])
    read = catalog_line("# READS-SMEM", Path(__file__).name)
    for _ in range(2):
        result = pallaslab.run(fn, rand((256,)), timeout=120)
        assert result.executor == "gpu-interpret"
        races = [f for f in result.findings if f.code == "data-race"]
        assert races and all(f.severity == "error" for f in races)
        # (which of warpgroup 0's writes, the TMA copy's or the scaling's, the detector pairs
        # with the read depends on which came first)
        assert all(f.message.startswith(
            f"_consumer_skips_the_wait: data race in block 0: the read at {read} by warpgroup "
            "1 and the write at ") and " by warpgroup 0 are not ordered. Rule: a warpgroup may "
            "touch SMEM another warpgroup writes" in f.message for f in races), \
            [f.message for f in races]
