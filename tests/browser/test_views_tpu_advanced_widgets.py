"""Views of kernels beyond BlockSpecs in real Chromium: the Grid of a nested emit_pipeline and
the Pipeline view's manual DMAs."""

from __future__ import annotations

from harness import mount
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.tiling import tile


def workbench(name):
    fn, args = CATALOG[name].case()[:2]
    return pallaslab.inspect(fn, *args)


def test_grid_selects_the_nested_pipeline_and_hovers_an_inner_program(page):
    wb = workbench("emit_pipeline_matmul")
    pipe = wb.kernels[0].pipelines[0]
    tiling = tile(pipe)
    mount(page, "grid.js", wb.grid().payload())
    # opens on the nested pipeline, its picker inside the view's frame (issue 39 item 3)
    assert page.locator(".pl-grid").get_attribute("data-programs") == "8"
    assert page.locator(".pl-grid .pl-head select.pl-pipeline-select").input_value() == "0"
    page.select_option("select.pl-pipeline-select", "-1")
    assert page.locator(".pl-grid").get_attribute("data-programs") == "1"  # the outer grid ()
    page.select_option("select.pl-pipeline-select", "0")
    assert page.locator(".pl-grid").get_attribute("data-programs") == "8"
    assert "grid 2 x 2 x 2" in page.locator(".pl-nested-label").inner_text()
    # default axes: rows = inner axis 1, columns = inner axis 2, axis 0 fixed at 0
    canvas = page.locator("canvas[data-role=grid]")
    cell = float(canvas.get_attribute("data-cell"))
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + 0.5 * cell, box["y"] + 1.5 * cell)
    program = (0, 1, 0)
    assert page.locator(".pl-info .pl-program").inner_text() == f"program {program}"
    step = tiling.step_of(program)
    blocks = page.eval_on_selector_all(
        "table.pl-blocks tr[data-origin]",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.origin, r.dataset.block]))")
    assert blocks == {origin: ",".join(str(v) for v in ot.block_indices[step])
                      for origin, ot in tiling.operands.items()}
    labels = page.locator(".pl-operand").all_inner_texts()
    assert any("x_ref (window of args[0])" in t for t in labels)


def test_pipeline_lists_the_manual_dmas_of_manual_dma_double_buffer(page):
    view = workbench("manual_dma_double_buffer").view("pipeline")
    mount(page, "pipeline.js", view.payload())
    rows = page.locator("table.pl-dmas tr[data-op]")
    assert rows.count() == 4
    cells = [rows.nth(i).locator("td").all_inner_texts() for i in range(4)]
    assert cells[0][:5] == ["async copy", "x_hbm (args[0], any) → buf (scratch[0], vmem)",
                            "32,768", "sems (scratch[2])", "kernels_tpu.py:129"]
    assert [c[0] for c in cells] == ["async copy", "async copy", "dma wait", "sync copy"]
    assert cells[1][5] == "in a loop: once per iteration"
    assert "how many iterations is not known" in page.locator(".pl-manual-note").inner_text()
    assert page.locator("canvas[data-role=timeline]").count() >= 1  # the BlockSpec model too
    # The recorded run: every event in order, the loop's DMAs with their iteration.
    recorded = page.locator("table.pl-recorded-ops tr[data-op]")
    assert recorded.count() == len(view.payload()["recorded"]["ops"]) == 24
    last = recorded.nth(21).locator("td").all_inner_texts()
    assert last == ["38", "dma", "scratch[1] (vmem #103) → outputs (hbm #101)",
                    "[192:256, 0:128]", "32,768", "", "kernels_tpu.py:140", "4"]
    assert page.locator(".pl-recorded-lines li").all_inner_texts()[1] == \
        "kernels_tpu.py:138: 4 completed waits"


def test_pipeline_of_a_mesh_kernel_lists_its_dmas_without_a_timeline(page):
    view = workbench("mesh_kernel").view("pipeline")
    mount(page, "pipeline.js", view.payload())
    assert page.locator("table.pl-dmas tr[data-op]").count() == 4
    assert page.locator("canvas[data-role=timeline]").count() == 0
