"""The pipeline view's ES module in real Chromium, against an in-page fake model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from harness import mount
from kernels import CATALOG, elementwise_2d

import pallaslab
from pallaslab.analysis.pipeline import COMPUTE

LABEL_W, LANE_H, AXIS_H = 132, 24, 20  # pipeline.js layout constants


def listen_for_programs(page):
    page.evaluate("""() => { window.programs = [];
        window.addEventListener('pallaslab:program', (e) => window.programs.push(e.detail)); }""")


def point(page, track, time, lane, duration):
    """Page coordinates of `time` in `lane` of a track drawn unzoomed."""
    canvas = page.locator(f'canvas[data-role=timeline][data-track="{track}"]')
    box = canvas.bounding_box()
    plot = float(canvas.get_attribute("data-plot-width"))
    return box["x"] + LABEL_W + time / duration * plot, box["y"] + AXIS_H + (lane + 0.5) * LANE_H


def pixel(page, track, x, y):
    return page.evaluate("""([track, x, y]) => {
        const c = document.querySelector(`canvas[data-role=timeline][data-track="${track}"]`);
        const r = c.getBoundingClientRect(); const d = window.devicePixelRatio || 1;
        return Array.from(c.getContext('2d').getImageData((x - r.left) * d, (y - r.top) * d, 1, 1)
            .data); }""", [track, x, y])


def css_rgb(page, var):
    return page.evaluate("""(v) => { const col = getComputedStyle(document.querySelector(
        '.pl-pipeline')).getPropertyValue(v).trim(); const c = document.createElement('canvas')
        .getContext('2d'); c.fillStyle = col; c.fillRect(0, 0, 1, 1);
        return Array.from(c.getImageData(0, 0, 1, 1).data); }""", var)


def test_hover_a_step_shows_its_program_and_announces_it(page, results_dir):
    fn, args = CATALOG["matmul_f32"].case()[:2]  # grid (4, 3, 2)
    view = pallaslab.inspect(fn, *args).pipeline().profile()
    mount(page, "pipeline.js", view.payload())
    listen_for_programs(page)
    assert page.locator("canvas[data-role=timeline]").count() == 2  # model and measured
    assert page.locator("label.pl-pipe-chip").is_hidden()  # no Python to model other chips
    ev = view.model.events
    duration = view.model.summary.predicted_time
    step = 5  # program (0, 2, 1)
    (row,) = np.flatnonzero((ev.kind == COMPUTE) & (ev.program == step))
    x, y = point(page, 0, (ev.start[row] + ev.end[row]) / 2, COMPUTE, duration)
    before = pixel(page, 0, x, y)
    page.mouse.move(x, y)
    pipe = page.locator(".pl-pipeline")
    assert pipe.get_attribute("data-hover-step") == "5"
    assert pipe.get_attribute("data-hover-program") == "(0, 2, 1)"
    info = page.locator(".pl-pipe-info").inner_text()
    assert info.startswith("model · step 5 · program (0, 2, 1) · compute: ")
    assert "same step: copy-in" in info
    assert page.evaluate("window.programs.at(-1)") == {
        "kernel": "matmul_kernel", "index": 0, "step": 5, "program": [0, 2, 1],
        "source": "pipeline", "how": "hover"}
    # the hovered step is lit (highlight colour) where it was drawn in the lane colour
    assert before[:3] == css_rgb(page, "--pl-accent")[:3]
    assert pixel(page, 0, x, y)[:3] == css_rgb(page, "--pl-hl")[:3]
    page.screenshot(path=str(results_dir / "pipeline-hover.png"))
    # click selects the step for Python (and the grid view, through `selection`)
    page.mouse.down()
    page.mouse.up()
    assert page.evaluate("window.model.get('selection')") == {"step": 5, "program": [0, 2, 1]}
    # wheel zooms in around the cursor; double-click resets
    page.mouse.wheel(0, -600)
    f0, f1 = float(pipe.get_attribute("data-f0")), float(pipe.get_attribute("data-f1"))
    assert 0 < f1 - f0 < 0.5 and f0 < (ev.start[row] + ev.end[row]) / 2 / duration < f1
    page.mouse.dblclick(x, y)
    assert (pipe.get_attribute("data-f0"), pipe.get_attribute("data-f1")) == ("0", "1")


def test_aggregated_timeline_draws_bins_and_hovers_approximate_steps(page, results_dir):
    x = jax.ShapeDtypeStruct((256 * 8, 256 * 128), jnp.float32)
    view = pallaslab.inspect(lambda a, b: elementwise_2d(a, b, block=(8, 128)), x, x).pipeline()
    p = view.payload()
    assert p["tracks"][0]["bins"] > 0
    mount(page, "pipeline.js", p)
    d = view.model.summary.predicted_time
    px, py = point(page, 0, 0.75 * d, COMPUTE, d)
    assert pixel(page, 0, px, py)[3] > 0  # the busy compute lane is drawn from the bins
    page.mouse.move(px, py)
    info = page.locator(".pl-pipe-info").inner_text()
    assert "aggregated" in info
    step = int(page.locator(".pl-pipeline").get_attribute("data-hover-step"))
    assert step == pytest.approx(0.75 * 65536, rel=0.01)
    page.screenshot(path=str(results_dir / "pipeline-aggregated.png"))


def test_memory_and_pipeline_tabs_work_in_the_offline_report(page, tmp_path, results_dir):
    fn, args = CATALOG["matmul_f32"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    out = wb.save_report(tmp_path / "report.html")
    model = wb.pipeline().model
    mid = model.summary.predicted_time / 2
    ev = model.events
    (row,) = np.flatnonzero((ev.kind == COMPUTE) & (ev.start <= mid) & (ev.end >= mid))
    program = wb.context(0).tiling.program_at(int(ev.program[row]))
    page.allowed.add(out.as_uri())
    page.goto(out.as_uri())
    page.wait_for_selector("#pl-root[data-ready=true]", timeout=20000)
    page.click("#pl-theme")  # dark
    page.locator(".pl-tabs button[data-tab=memory]").click()
    page.wait_for_selector(".pl-pane[data-tab=memory] .pl-mem-row[data-chip=v6e]")
    assert "448 KiB of 16 MiB" in page.locator(".pl-mem-row[data-chip=v5e]").inner_text()
    page.screenshot(path=str(results_dir / "report-memory-dark.png"), full_page=True)
    page.locator(".pl-tabs button[data-tab=pipeline]").click()
    canvas = page.locator(".pl-pane[data-tab=pipeline] canvas[data-role=timeline]")
    canvas.wait_for()
    box = canvas.bounding_box()
    plot = float(canvas.get_attribute("data-plot-width"))
    page.mouse.move(box["x"] + LABEL_W + plot * 0.5, box["y"] + AXIS_H + 1.5 * LANE_H)
    assert page.locator(".pl-pipeline").get_attribute("data-hover-program") == str(program)
    page.screenshot(path=str(results_dir / "report-pipeline-dark.png"), full_page=True)
    assert [u for u in page.requests_attempted if u != out.as_uri()] == []


def test_live_chip_choice_is_sent_to_python(page):
    fn, args = CATALOG["elementwise_1d"].case()[:2]
    p = pallaslab.inspect(fn, *args).pipeline().payload()
    mount(page, "pipeline.js", {**p, "live": True})
    page.select_option("select.pl-chip", "v6e")
    assert page.evaluate("window.model.get('selection')") == {"chip": "v6e"}
    assert page.locator("select.pl-chip").is_disabled()  # until the new model arrives


def test_manual_dma_headline_says_what_the_dmas_moved_and_the_event_table_is_folded(page):
    """Issue 39 item 3: a kernel that moves its own data read "HBM traffic 0 B · exposed copy
    0 · 100% compute-bound" above a recorded run that moved 262,144 B; its 24-event table was
    unfolded."""
    fn, args = CATALOG["manual_dma_double_buffer"].case()[:2]
    view = pallaslab.inspect(fn, *args).view("pipeline")
    mount(page, "pipeline.js", view.payload())
    facts = page.locator(".pl-pipe-facts").inner_text()
    assert "262,144 B in 8 DMAs (recorded tpu-interpret run)" in facts
    assert "not estimated: the model does not time the kernel's own DMAs" in facts
    assert "compute-bound" not in facts and "0 B" not in facts
    rows = page.locator("table.pl-recorded-ops tr[data-op]")
    assert rows.count() == 24
    visible = lambda: sum(rows.nth(i).is_visible() for i in range(24))
    assert visible() == 12
    toggle = page.locator("button.pl-fold-toggle")
    assert toggle.inner_text() == "show all 24 events"
    toggle.click()
    assert visible() == 24 and toggle.inner_text() == "show the first 12 events"
