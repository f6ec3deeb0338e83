"""Views of kernels beyond BlockSpecs (nested emit_pipelines, run_scoped buffers, manual DMAs,
semaphores, mesh kernels): every view renders (payload, static HTML, text) for every
"tpu-advanced" catalog kernel that captures, and shows what those kernels hold."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest
from catalog import catalog_names
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import CATALOG

import pallaslab
from pallaslab.views.report import encode_buffers

NAMES = catalog_names(tag="tpu-advanced")
_WORKBENCHES: dict[str, pallaslab.Workbench] = {}


def workbench(name: str) -> pallaslab.Workbench:
    if name not in _WORKBENCHES:
        fn, args = CATALOG[name].case()[:2]
        _WORKBENCHES[name] = pallaslab.inspect(fn, *args)
    return _WORKBENCHES[name]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tab", ["grid", "pipeline", "memory"])
def test_every_view_renders(name, tab):
    wb = workbench(name)
    for i, _ in enumerate(wb.kernels):
        if tab not in [t.name for t in wb.tabs(i)]:
            continue
        view = wb.view(tab, i)
        json.dumps(encode_buffers(view.payload()))
        assert view.to_html().strip()
        assert view.to_text().strip()
        assert view._repr_mimebundle_()


def test_grid_shows_the_nested_pipeline_of_emit_pipeline_matmul():
    view = workbench("emit_pipeline_matmul").view("grid")
    payload = view.payload()
    assert payload["programs"] == 1  # the outer grid () is one program
    [nested] = payload["pipelines"]
    inner = nested["payload"]
    assert inner["grid"] == [2, 2, 2] and inner["programs"] == 8
    labels = [op["label"] for op in inner["operands"]]
    assert labels == ["x_ref (window of args[0])", "y_ref (window of args[1])",
                      "z_ref (window of outputs)"]
    text = view.to_text()
    nested = "nested pipeline 0 (kernels_tpu.py:48): grid 2 x 2 x 2 = 8 programs"
    assert nested in text and nested in view.to_html()


def test_grid_of_bounded_slice_pipeline_windows_scratch():
    view = workbench("bounded_slice_pipeline").view("grid")
    [nested] = view.payload()["pipelines"]
    assert nested["payload"]["grid"] == [3, 2]
    # The windows slice VMEM scratch in place (JAX's compute_slice): each spans its whole
    # bound of 6 rows from its start 2i, with no copies; rows 0-9 are covered.
    assert nested["payload"]["note"] is None and nested["payload"]["findings"] == []
    x_ref, o_ref = nested["payload"]["operands"]
    assert x_ref["extent"] == [6, 8, 256] and x_ref["scale"] == [1, 8, 256]
    assert x_ref["index"][0] == {"affine": [0, 2, 0], "table": None}
    assert x_ref["size"] == [None, None, None] and not x_ref["windowed"]
    assert x_ref["fetches"] is None and o_ref["hbm_bytes"] is None


def _ragged_rows(x_hbm, o_hbm):
    # 40 rows from HBM in BoundedSlice windows of at most 16: 16, 16 and 8 rows
    spec = pl.BlockSpec((pl.BoundedSlice(16), 128),
                        lambda i: (pl.ds(i * 16, jnp.minimum(16, 40 - i * 16)), 0))
    pltpu.emit_pipeline(_double_rows, grid=(3,), in_specs=[spec], out_specs=[spec])(
        x_hbm, o_hbm)


def test_bounded_slice_windows_copied_from_hbm_move_their_own_rows():
    def fn(x):
        return pl.pallas_call(_ragged_rows, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pl.ANY))(x)

    wb = pallaslab.inspect(fn, jnp.ones((40, 128), jnp.float32))
    [nested] = wb.view("grid").payload()["pipelines"]
    x_ref, o_ref = nested["payload"]["operands"]
    assert x_ref["index"][0] == {"affine": [0, 16], "table": None}
    assert x_ref["size"][0]["table"] is not None  # 16, 16, 8: not affine
    assert x_ref["fetches"] == o_ref["fetches"] == 3
    assert x_ref["hbm_bytes"] == (16 + 16 + 8) * 128 * 4
    assert nested["payload"]["findings"] == []  # the 40 rows are covered exactly
    shown = "(<=16, 128); dim 0 by step: 16, 16, 8"
    row = next(ln for ln in wb.view("grid").to_text().splitlines() if shown in ln)
    assert row.split()[-1] == "3"  # fetches
    assert f"<td>{shown.replace('<', '&lt;')}</td>" in wb.view("grid").to_html()


def test_grid_of_a_nested_pipeline_spans_the_outer_programs():
    """Inner index maps using the outer program id: tiled over the kernel's grid x the inner
    one, each outer program fetching its own rows from its first step."""
    view = workbench("emit_pipeline_per_program").view("grid")
    [nested] = view.payload()["pipelines"]
    p = nested["payload"]
    assert nested["label"].endswith("grid 2 x 4 (the kernel's 2 x its own 4)")
    assert p["grid"] == [2, 4] and p["grid_names"] == ["outer 0", "inner 0"]
    x_ref, o_ref = p["operands"]
    assert x_ref["index"][0] == {"affine": [0, 4, 1], "table": None}  # row block 4i + j
    assert x_ref["fetches"] == o_ref["fetches"] == 8 and p["findings"] == []
    assert "grid 2 x 4 (the kernel's 2 x its own 4) = 8 programs" in view.to_text()


def _rows_from_a_ref(n_ref, x_hbm, o_hbm):
    n = n_ref[0]  # read while the kernel runs: the inner windows are unknown before
    spec = pl.BlockSpec((8, 128), lambda j: (n + j, 0))
    pltpu.emit_pipeline(_double_rows, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def _double_rows(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def test_a_nested_pipeline_whose_windows_depend_on_run_time_values_says_so():
    def fn(n, x):
        return pl.pallas_call(
            _rows_from_a_ref, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY))(n, x)

    wb = pallaslab.inspect(fn, jnp.zeros((1,), jnp.int32), jnp.ones((32, 128), jnp.float32))
    [pipe] = wb.kernels[0].pipelines
    assert pipe.outer_dims == 0 and pipe.grid == (4,)
    text = wb.view("grid").to_text()
    assert "its index maps use values the enclosing kernel computes while it runs" in text


def test_grid_of_a_mesh_kernel_says_why_there_is_no_grid():
    view = workbench("mesh_kernel").view("grid")
    payload = view.payload()
    assert payload["programs"] == 0 and payload["pipelines"] == []
    note = ("TensorCoreMesh kernel: 2 on mesh axis core (the body runs once per core); "
            "no BlockSpec grid")
    assert payload["note"] == note
    assert note in view.to_text() and note in view.to_html()


def test_pipeline_lists_manual_dmas_and_waits_in_program_order():
    view = workbench("manual_dma_double_buffer").view("pipeline")
    manual = view.payload()["manual"]
    assert [(o["op"], o["source"], o["repeated"]) for o in manual] == [
        ("async copy", "kernels_tpu.py:129", False), ("async copy", "kernels_tpu.py:136", True),
        ("dma wait", "kernels_tpu.py:138", False), ("sync copy", "kernels_tpu.py:140", True)]
    first = manual[0]
    assert first["src"] == "x_hbm (args[0], any)" and first["dst"] == "buf (scratch[0], vmem)"
    assert first["bytes"] == 32_768 and first["semaphore"] == "sems (scratch[2])"
    text = view.to_text()
    assert "2 of them sit in a loop of the body" in text
    assert "x_hbm (args[0], any) -> buf (scratch[0], vmem), 32,768 B" in text
    assert "Manual DMAs and semaphores" in view.to_html()


def test_pipeline_shows_the_recorded_run_of_the_manual_dmas():
    """What the static listing cannot know: the loop's DMAs ran 3 and 4 times, in this order,
    each writing its own rows (recorded by tpu-interpret)."""
    view = workbench("manual_dma_double_buffer").view("pipeline")
    recorded = view.payload()["recorded"]
    assert recorded["executor"] == "tpu-interpret" and not recorded["truncated"]
    assert recorded["lines"] == [
        "kernels_tpu.py:129: 1 DMA, 1 signal (32,768 B)",
        "kernels_tpu.py:138: 4 completed waits",
        "kernels_tpu.py:140: 4 DMAs, 4 signals, 4 completed waits (131,072 B)",
        "kernels_tpu.py:136: 3 DMAs, 3 signals (98,304 B)"]
    dmas = [o for o in recorded["ops"] if o["op"] == "dma"]
    assert [(o["source"], o["iteration"]) for o in dmas] == [
        ("kernels_tpu.py:129", 0), ("kernels_tpu.py:140", 0), ("kernels_tpu.py:136", 0),
        ("kernels_tpu.py:140", 1), ("kernels_tpu.py:136", 1), ("kernels_tpu.py:140", 2),
        ("kernels_tpu.py:136", 2), ("kernels_tpu.py:140", 3)]
    # The prefetches alternate slots; the write-backs walk the output's rows.
    assert [o["region"] for o in dmas if o["source"] == "kernels_tpu.py:136"] == [
        "[1, 0:64, 0:128]", "[0, 0:64, 0:128]", "[1, 0:64, 0:128]"]
    assert [o["region"] for o in dmas if o["source"] == "kernels_tpu.py:140"] == [
        "[0:64, 0:128]", "[64:128, 0:128]", "[128:192, 0:128]", "[192:256, 0:128]"]
    assert dmas[1]["src"] == "scratch[1] (vmem #103)" and dmas[1]["dst"] == "outputs (hbm #101)"
    # semaphores as the kernel names them (sems = scratch[2]); a sync_copy's own has no name
    signals = [(o["source"], o["semaphore_name"]) for o in recorded["ops"] if o["op"] == "signal"]
    assert signals[:3] == [("kernels_tpu.py:129", "sems[0] (scratch[2][0])"),
                           ("kernels_tpu.py:140", None),
                           ("kernels_tpu.py:136", "sems[1] (scratch[2][1])")]
    text = view.to_text()
    assert "signal semaphore sems[0] (scratch[2][0]) (+32768) at kernels_tpu.py:129" in text
    assert "Recorded run (tpu-interpret), per line:" in text
    assert "DMA scratch[1] (vmem #103) -> outputs (hbm #101) [64:128, 0:128], 32,768 B at " \
        "kernels_tpu.py:140 (#2 of its line)" in text
    assert "Recorded run (tpu-interpret)" in view.to_html()


def test_pipeline_says_why_a_kernel_has_no_recorded_run():
    payload = workbench("semaphore_read_kernel").view("pipeline").payload()
    assert payload["recorded"] is None
    assert payload["recorded_note"].startswith(
        "no recorded run: tpu-interpret unavailable: JAX's TPU interpreter (TPU interpret "
        "mode) does not implement pl.semaphore_read")


def test_pipeline_reuses_the_comparisons_recorded_run():
    fn, args = CATALOG["run_scoped_sync_copy"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    comparison = wb.compare(executors=["tpu-interpret", "interpret"]).comparison
    view = wb.view("pipeline")
    assert view.recorded_run is comparison.result("tpu-interpret")
    # sync_copy's DMAs carry no line in the log: they get their sync_copy's.
    assert view.payload()["recorded"]["lines"] == [
        "kernels_tpu.py:166: 1 DMA, 1 signal, 1 completed wait (65,536 B)",
        "kernels_tpu.py:168: 1 DMA, 1 signal, 1 completed wait (65,536 B)"]


def test_pipeline_of_a_mesh_kernel_shows_its_dmas_without_a_model():
    view = workbench("core_map_kernel").view("pipeline")
    payload = view.payload()
    assert payload["tracks"] == [] and payload["programs"] == 0
    assert [o["op"] for o in payload["manual"]] == ["async copy", "dma wait", "async copy",
                                                   "dma wait"]
    assert payload["manual"][0]["dst"] == "vbuf (scoped[0], vmem)"
    assert "no BlockSpec pipeline (manual DMAs only)" in view.to_text()


def test_pipeline_models_the_inner_grid_of_a_nested_pipeline():
    payload = workbench("emit_pipeline_matmul").view("pipeline").payload()
    [nested] = payload["nested"]
    assert nested["label"] == "nested pipeline 0: grid 2 x 2 x 2"
    assert nested["lines"][0].startswith("8 steps, predicted ")


def test_memory_shows_scratch_and_semaphores_of_a_mesh_kernel():
    wb = workbench("mesh_kernel")
    assert "memory" in [t.name for t in wb.tabs()]
    view = wb.view("memory")
    v5e = view.payload()["chips"][0]
    ops = {o["origin"]: o for o in v5e["operands"]}
    assert ops["scratch[0]"]["space"] == "vmem" and ops["scratch[0]"]["bytes"] == 4096
    assert ops["scratch[1]"]["space"] == "semaphore" and v5e["semaphores"] == 1
    assert ops["scratch[0]"]["label"] == "vbuf (scratch[0])"
    assert "vbuf (scratch[0])" in view.to_html()


def test_memory_shows_run_scoped_buffers_and_nested_pipeline_buffers():
    ops = {o["origin"]: o for o in
           workbench("core_map_kernel").view("memory").payload()["chips"][0]["operands"]}
    assert ops["scoped[0]"]["label"] == "vbuf (scoped[0])" and ops["scoped[0]"]["bytes"] == 4096
    view = workbench("emit_pipeline_matmul").view("memory")
    v5e = view.payload()["chips"][0]
    labels = [o["label"] for o in v5e["operands"]]
    assert labels == ["x_ref (pipelines[0].args[0], window of args[0])",
                      "y_ref (pipelines[0].args[1], window of args[1])",
                      "z_ref (pipelines[0].outputs, window of outputs)"]
    assert v5e["bytes"] == 3 * 2 * 128 * 128 * 4 and v5e["semaphores"] == 6
    assert "x_ref (pipelines[0].args[0], window of args[0])" in view.to_text()


def test_memory_of_a_sparsecore_kernel_counts_a_subcores_vmem():
    """SparseCore buffers live in each vector subcore's own VMEM (256 KiB on v6e), not the
    TensorCore's scoped VMEM; v5e has no SparseCore at all."""
    view = workbench("sparsecore_vector_add").view("memory")
    v5e, v6e = view.payload()["chips"]
    assert (v6e["limit"], v6e["limit_source"], v6e["fits"]) == (
        256 * 1024, "SparseCore subcore VMEM", True)
    assert (v5e["limit"], v5e["fits"]) == (0, False)
    assert "DOES NOT RUN: the chip has no SparseCore" in view.to_text()
    [finding] = [f for f in workbench("sparsecore_vector_add").findings
                 if f.code == "no-sparse-core"]
    assert finding.severity == "error" and finding.message.startswith(
        "body runs on SparseCore subcores (a VectorSubcoreMesh kernel) but TPU v5e has no "
        "SparseCore")
