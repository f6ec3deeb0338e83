"""The Pipeline widget of a GPU kernel in real Chromium (issue 42 item 2): the GPU time model's
lead line and facts, as the text has them, redrawn when Python sends a measured run."""

from __future__ import annotations

from harness import mount
from kernels import CATALOG

import pallaslab


def test_a_triton_kernel_shows_the_prediction_its_bound_and_a_measured_run(page):
    fn, args = CATALOG["masked_vector_add"].case()[:2]
    view = pallaslab.inspect(fn, *args).view("pipeline")
    payload = view.payload()
    mount(page, "pipeline.js", payload)
    assert page.locator(".pl-pipeline-gpu .pl-title").inner_text().endswith("GPU H100, model")
    assert page.locator(".pl-pipeline-gpu .pl-lead").inner_text() == payload["gpu"]["lead"]
    facts = page.locator(".pl-gpu-facts dt").all_inner_texts()
    values = page.locator(".pl-gpu-facts dd").all_inner_texts()
    assert list(zip(facts, values, strict=True)) == view.gpu_facts()
    bound = view.gpu_predictions[0].bound
    assert facts[0] == "predicted on H100" and values[0].endswith(f"{bound}-bound")
    assert "over 132 SMs" in values[1] and page.locator("canvas").count() == 0
    # a profile taken in Python: the new payload's measured fact is drawn in place
    page.evaluate("""() => { const p = structuredClone(window.payload);
        p.gpu.facts.push(["measured", "NVIDIA H100 80GB HBM3: 3.00 µs, 4 steps"]);
        window.model.set("payload", p); }""")
    assert page.locator(".pl-pipeline-gpu").count() == 1
    assert page.locator(".pl-gpu-facts dd").last.inner_text() == \
        "NVIDIA H100 80GB HBM3: 3.00 µs, 4 steps"
