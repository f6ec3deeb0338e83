"""The Pipeline tab of a GPU kernel (issue 42 item 2): on a CPU, the GPU time model's prediction
per GPU the workbench targets (H100 unless told), its bound and the figures behind it, the
measured run where one was profiled and the published timings where the table is set; the text,
the static HTML and the widget's payload carry the same facts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import workbench

from pallaslab.analysis.gpu_model import gpu_prediction
from pallaslab.settings import PUBLISHED_TIMINGS
from pallaslab.views.parts import to_text
from pallaslab.views.pipeline_manual import format_time


def _predicted(view, gpu: str = "h100") -> str:
    p = gpu_prediction(view.ctx.kernel, gpu)
    return f"predicted on {gpu.upper()} {format_time(p.time_s)}, {p.bound}-bound"


def test_a_triton_kernel_has_a_pipeline_tab_with_the_prediction_and_its_bound():
    wb = workbench("masked_vector_add")
    assert "pipeline" in [t.name for t in wb.tabs()]  # was: "models the TPU pipeline"
    view = wb.view("pipeline")
    text, html = view.to_text(), view.to_html()
    p = gpu_prediction(view.ctx.kernel, "h100")
    assert text.splitlines()[0] == "Pipeline of kernel 0 _masked_add_kernel on GPU H100 (model)"
    assert (f"4 blocks, predicted H100 {format_time(p.time_s)}, {p.bound}-bound "
            "(GPU time model)") in text
    assert _predicted(view) in text
    assert (f"H100 waves 4 blocks in {p.waves} wave{'s' if p.waves != 1 else ''} over 132 "
            f"SMs, at most {p.blocks_per_sm} resident per SM (limited by ") in text
    assert "bytes moved 2,400 B through HBM" in text  # two 200-element f32 inputs, one output
    assert "per-block overhead launch " in text and "flops 0 (" in text
    assert f"{p.bound}-bound" in html and "<b>" in html
    assert f"predicted on H100 <b>{format_time(p.time_s)}, {p.bound}-bound</b>" in html
    assert "GPU H100, model" in html and "B200" not in text


def test_b200_is_predicted_when_the_workbench_targets_it():
    view = workbench("masked_vector_add", targets=["gpu-h100", "gpu-b200"]).view("pipeline")
    text = view.to_text()
    assert text.splitlines()[0].endswith("on GPU H100, B200 (model)")
    assert _predicted(view, "h100") in text and _predicted(view, "b200") in text
    assert "B200 waves 4 blocks in 1 wave over 148 SMs, at most " in text
    assert view.payload()["gpu"]["gpus"] == ["h100", "b200"]


def test_a_mosaic_gpu_kernel_shows_the_prediction_beside_its_tma_copies():
    view = workbench("tma_blocks").view("pipeline")
    text = view.to_text()
    assert _predicted(view) in text and "2 blocks, predicted H100 " in text
    assert "moved by its DMAs 1,024 B in 2 DMAs" in text
    assert "tma copy; x_gmem (args[0], gmem) -> x_smem (scoped[0], smem)" in text
    assert "predicted on H100 <b>" in view.to_html() and "tma copy" in view.to_html()
    # a Mosaic GPU kernel without manual copies gets the tab too, for the model
    plain = workbench("gpu_mesh_kernel").view("pipeline")
    assert _predicted(plain) in plain.to_text()


def test_the_widget_payload_carries_the_same_lead_and_facts():
    view = workbench("masked_vector_add").view("pipeline")
    payload = view.payload()
    tree = view.tree()
    gpu = payload["gpu"]
    assert gpu is not None and payload["tracks"] == []  # the widget draws the facts
    assert gpu["lead"] == tree.children[0].parts[0]
    assert [tuple(f) for f in gpu["facts"]] == view.gpu_facts()
    assert all(f"{a} {b}" in to_text(tree) for a, b in gpu["facts"])
    assert [a for a, _ in gpu["facts"]][:3] == ["predicted on H100", "H100 waves", "H100 terms"]


def test_a_measured_run_is_shown_beside_the_model():
    from pallaslab.analysis.pipeline import Events
    from pallaslab.execute.profile import KINDS, ProfileTimeline

    # what `profile()` returns on a GPU: the kernel's event and one step per program
    run = ProfileTimeline("k", "NVIDIA H100 80GB HBM3", Events(
        lane=np.array([0, 1, 1], np.int16), start=np.array([0.0, 0.0, 1e-6]),
        end=np.array([3e-6, 1e-6, 2e-6]), kind=np.array([0, 1, 1], np.int16),
        program=np.array([-1, 0, 1], np.int64),
        lanes=("gpu (kernel)", "gpu (steps)", "gpu (ops)"), kinds=KINDS), None)
    view = workbench("masked_vector_add").view("pipeline")
    view.measured = run
    text = view.to_text()
    assert _predicted(view) in text
    assert "measured NVIDIA H100 80GB HBM3: 3.00 µs, 2 steps, mean step 1.00 µs" in text
    assert view.payload()["measured"]["total_time"] == pytest.approx(3e-6)
    assert ["measured", "NVIDIA H100 80GB HBM3: 3.00 µs, 2 steps, mean step 1.00 µs"] in \
        view.payload()["gpu"]["facts"]
    assert view.to_html().count("<svg") == 1  # the measured timeline; the model has none


HEADER = "hardware,op_file,data_commit,problem,config,median_ms,times_ms,flops_nominal,tflops\n"
# Rows whose main arrays have the masked_vector_add kernel's operand sizes (200 elements):
# H100 and B200 Triton rows are shown, H100 first; the Mosaic GPU row (another backend), the
# TPU row and a row of other sizes are not.
TABLE = HEADER + "\n".join([
    'B200,pallas_triton_flash_attention,x,"q=f32[200] k=f32[200] v=f32[200] causal=False",'
    '"{""block_q"":64}",0.02,0.02 0.02,,',
    'H100 80GB HBM3,pallas_triton_flash_attention,x,"q=f32[200] k=f32[200] v=f32[200] '
    'causal=False","{""block_q"":32}",0.01,0.01 0.01,,',
    'H100 80GB HBM3,pallas_mosaic_gpu_flash_attention,x,"q=f32[200] k=f32[200] v=f32[200]",'
    '"{}",0.03,0.03,,',
    'H100 80GB HBM3,pallas_triton_flash_attention,x,"q=f32[512] k=f32[512] v=f32[512]",'
    '"{}",0.04,0.04,,',
    'TPU v5e,pallas_mosaic_tpu_flash_attention,x,"q=f32[200] k=f32[200] v=f32[200]",'
    '"{}",0.05,0.05,,',
]) + "\n"


def test_the_published_gpu_time_is_shown_when_the_table_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "table.csv"
    table.write_text(TABLE)
    view = workbench("masked_vector_add").view("pipeline")
    monkeypatch.delenv(PUBLISHED_TIMINGS, raising=False)
    assert "published" not in view.to_text()  # off unless the table is set
    monkeypatch.setenv(PUBLISHED_TIMINGS, str(table))
    text = view.to_text()
    h100 = ("published on H100 80GB HBM3: 0.010 ms (pallas_triton_flash_attention, tokamax "
            'autotune, config {"block_q":32}')
    assert h100 in text and "published on B200: 0.020 ms" in text
    assert text.index("on H100 80GB HBM3: 0.010") < text.index("on B200: 0.020")
    assert "0.030 ms" not in text and "0.040 ms" not in text and "0.050 ms" not in text
    assert "published <b>on H100 80GB HBM3: 0.010 ms" in view.to_html()
    assert any(h100 in line for line in view.payload()["published"])
    assert any(fact == "published" and "0.010 ms" in value
               for fact, value in view.payload()["gpu"]["facts"])
