"""The grid view's ES module in real Chromium, against an in-page fake model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from harness import mount
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.inspection import inspect_kernel


def case(name):
    fn, args = CATALOG[name].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    tiling = inspect_kernel(wb.kernels[0]).tiling
    return wb, tiling


def hover_cell(page, r, c):
    canvas = page.locator("canvas[data-role=grid]")
    cell = float(canvas.get_attribute("data-cell"))
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + (c + 0.5) * cell, box["y"] + (r + 0.5) * cell)


def shown_blocks(page):
    return page.eval_on_selector_all(
        "table.pl-blocks tr[data-origin]",
        "rows => Object.fromEntries(rows.map(r => "
        "[r.dataset.origin, [r.dataset.block, r.dataset.copy]]))")


def expected_copy(ot, step, programs):
    """The TPU pipeline's copy at a step: inputs are fetched when their block index changes;
    outputs are written back at the last step of each run on a block."""
    if ot.role != "output":
        return "fetch" if ot.fetch_mask[step] else "revisit"
    last = step == programs - 1 or ot.fetch_mask[step + 1]
    return "write" if last else "revisit"


def pixel(page, origin, x, y, layer=1):
    """RGBA of an operand panel's canvas (layer 0 base, 1 highlights) at CSS pixel (x, y)."""
    return page.evaluate(
        """([origin, x, y, layer]) => {
            const sel = `.pl-operand[data-origin="${origin}"] canvas`;
            const c = document.querySelectorAll(sel)[layer];
            const d = window.devicePixelRatio || 1;
            return Array.from(c.getContext("2d").getImageData(x * d, y * d, 1, 1).data);
        }""", [origin, x, y, layer])


def test_hover_lights_the_programs_blocks_in_every_operand(page):
    wb, tiling = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload())
    # default axes: rows = grid axis 1, cols = grid axis 2, axis 0 fixed at 0
    hover_cell(page, 2, 1)
    program = (0, 2, 1)
    step = tiling.step_of(program)
    assert page.locator(".pl-info .pl-program").inner_text() == f"program {program}"
    blocks = shown_blocks(page)
    for origin, ot in tiling.operands.items():
        expected = ",".join(str(v) for v in ot.block_indices[step])
        assert blocks[origin][0] == expected, origin
        assert blocks[origin][1] == expected_copy(ot, step, tiling.programs)
    # the highlighted block is drawn where the block is: args[1] block (1, 2) in a (256, 384)
    # array of (128, 128) blocks -> centre of the lower-right block is lit, upper-left is not
    panel = page.locator('.pl-operand[data-origin="args[1]"] canvas').nth(1).bounding_box()
    lit = pixel(page, "args[1]", panel["width"] * 5 / 6, panel["height"] * 3 / 4)
    dark = pixel(page, "args[1]", panel["width"] / 6, panel["height"] / 4)
    assert lit[3] > 0 and dark[3] == 0
    # the range text is the block's element window
    row = page.locator('table.pl-blocks tr[data-origin="args[1]"] .pl-range').inner_text()
    assert row == "[128:256, 256:384]"
    assert int(page.locator(".pl-grid").get_attribute("data-hover")) == step


def test_scrubber_walks_programs_in_execution_order_marking_fetches(page):
    wb, tiling = case("output_revisit_clobber")
    mount(page, "grid.js", wb.grid().payload())
    seen = []
    for step in range(tiling.programs):
        page.evaluate("""(s) => { const r = document.querySelector('input.pl-scrubber');
            r.value = String(s); r.dispatchEvent(new Event('input')); }""", step)
        seen.append((page.locator(".pl-info .pl-program").inner_text(), shown_blocks(page)))
    for step, (program, blocks) in enumerate(seen):
        assert program == f"program {tiling.program_at(step)}"
        for origin, ot in tiling.operands.items():
            assert blocks[origin] == [",".join(map(str, ot.block_indices[step])),
                                      expected_copy(ot, step, tiling.programs)]
    # next/previous buttons and the synced selection
    page.click("button.pl-next")
    assert page.locator(".pl-grid").get_attribute("data-step") == str(tiling.programs - 1)
    page.click("button.pl-prev")
    assert page.evaluate("window.model.get('selection')") == {"step": 2, "program": [2]}


def test_play_runs_to_the_last_program(page):
    wb, tiling = case("elementwise_1d")
    mount(page, "grid.js", wb.grid().payload())
    page.click("button.pl-play")
    page.wait_for_function(
        f"document.querySelector('.pl-grid').dataset.step === '{tiling.programs - 1}' && "
        "document.querySelector('button.pl-play').textContent === '▶'", timeout=10000)


@pytest.mark.parametrize("name", ["matmul_f32", "reduction_revisited_output",
                                  "scalar_prefetch_gather", "squeezed_dims"])
def test_fetch_and_coverage_counts_match_the_tiling(page, name):
    wb, tiling = case(name)
    mount(page, "grid.js", wb.grid().payload())
    for o, ot in enumerate(tiling.operands.values()):
        js = page.evaluate(
            """([o]) => { const t = new window.view.Tiling(window.payload);
                 return [Array.from(t.counts(o, 'fetches')),
                         Array.from(t.counts(o, 'visits'))]; }""",
            [o])
        lo = ot.block_indices.min(axis=0)
        span = ot.block_indices.max(axis=0) - lo + 1
        keys = np.ravel_multi_index(tuple((ot.block_indices - lo).T), tuple(span))
        visits = np.bincount(keys, minlength=int(np.prod(span)))
        fetches = np.bincount(keys[ot.fetch_mask], minlength=int(np.prod(span)))
        assert js[0] == fetches.tolist(), ot.origin
        assert js[1] == visits.tolist(), ot.origin


def test_coverage_overlay_marks_uncovered_output_blocks(page):
    wb, _tiling = case("uncovered_output")
    mount(page, "grid.js", wb.grid().payload())
    page.select_option("select.pl-overlay", "coverage")
    panel = page.locator('.pl-operand[data-origin="outputs"] canvas').first.bounding_box()
    error = page.evaluate("window.view.rgb(getComputedStyle(document.querySelector('.pl-grid'))"
                          ".getPropertyValue('--pl-error'))")
    # output (256, 128) in (64, 128) blocks, only blocks 0 and 1 written: rows 128.. uncovered
    low = pixel(page, "outputs", panel["width"] / 2, panel["height"] * 7 / 8, layer=0)
    high = pixel(page, "outputs", panel["width"] / 2, panel["height"] / 8, layer=0)
    assert low[:3] == error
    assert high[:3] != error


def test_findings_are_listed_and_located(page):
    wb, _tiling = case("racy_parallel_accumulate")
    payload = wb.grid().payload()
    mount(page, "grid.js", payload)
    items = page.locator("li.pl-finding")
    assert items.count() == len(payload["findings"])
    race = next(i for i, f in enumerate(payload["findings"])
                if f["code"] == "parallel-write-conflict")
    items.nth(race).click()
    assert page.locator("select.pl-overlay").input_value() == "findings"
    first = payload["findings"][race]["steps"][0]
    assert page.locator(".pl-grid").get_attribute("data-step") == str(first)
    # the raced output block (0, 0) is hatched in the findings overlay
    box = page.locator('.pl-operand[data-origin="outputs"] canvas').first.bounding_box()
    base = pixel(page, "outputs", box["width"] / 2, box["height"] / 2, layer=0)
    error = page.evaluate("window.view.rgb(getComputedStyle(document.querySelector('.pl-grid'))"
                          ".getPropertyValue('--pl-error'))")
    assert base[:3] != [0, 0, 0] and (base[:3] == error or base[0] > base[2])


def test_more_than_two_grid_axes_pick_two_and_slide_the_rest(page):
    wb, _tiling = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload())
    page.select_option("select.pl-axis-row", "0")
    page.select_option("select.pl-axis-col", "1")
    sliders = page.locator("input.pl-slider")
    assert sliders.count() == 1 and sliders.first.get_attribute("data-axis") == "2"
    page.evaluate("""() => { const s = document.querySelector('input.pl-slider');
        s.value = '1'; s.dispatchEvent(new Event('input')); }""")
    hover_cell(page, 3, 2)
    assert page.locator(".pl-info .pl-program").inner_text() == "program (3, 2, 1)"
    # picking the same axis twice swaps them instead
    page.select_option("select.pl-axis-row", "1")
    assert page.locator("select.pl-axis-col").input_value() == "0"


def test_million_programs_render_aggregated_and_hover(page):
    import jax
    import jax.numpy as jnp
    from kernels import elementwise_2d

    x = jax.ShapeDtypeStruct((1024 * 8, 1024 * 128), jnp.float32)
    wb = pallaslab.inspect(lambda a, b: elementwise_2d(a, b, block=(8, 128)), x, x)
    mount(page, "grid.js", wb.grid().payload())
    canvas = page.locator("canvas[data-role=grid]")
    assert float(canvas.get_attribute("data-cell")) < 1  # aggregated: < 1 px per program
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] - 1)
    program = page.locator(".pl-info .pl-program").inner_text()
    r, c = (int(v) for v in program.removeprefix("program (").removesuffix(")").split(", "))
    assert r > 1000 and c > 1000
    assert shown_blocks(page)["outputs"][0] == f"{r},{c}"


def test_user_strings_are_text_not_markup(page):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from kernels import add_kernel

    evil = '<img src=x onerror="window.pwned=1">'

    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=evil, grid=(2,), in_specs=[spec, spec], out_specs=spec)(x, x)

    wb = pallaslab.inspect(fn, jax.ShapeDtypeStruct((16, 128), jnp.float32))
    for module, view in (("grid.js", wb.grid()), ("overview.js", wb.overview())):
        mount(page, module, view.payload())
        assert evil in page.locator("#root").inner_text()
        assert page.locator("#root img").count() == 0
        assert page.evaluate("window.pwned") is None
    assert page.requests_attempted == []


def test_hovering_a_block_finds_the_programs_that_use_it(page):
    wb, tiling = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload())
    canvas = page.locator('.pl-operand[data-origin="outputs"] canvas').nth(1)
    box = canvas.bounding_box()
    # outputs (512, 384) in (128, 128) blocks: block (0, 1) is row 0 of 4, column 1 of 3
    page.mouse.move(box["x"] + box["width"] * 1.5 / 3, box["y"] + box["height"] * 0.5 / 4)
    info = page.locator('.pl-operand[data-origin="outputs"] .pl-axislabel').last.inner_text()
    # the grid slice shown is i = 0 (rows j, cols k): programs (0, 1, 0) and (0, 1, 1)
    users = [s for s in range(tiling.programs) if tiling.program_at(s)[0] == 0
             and tuple(tiling.operands["outputs"].block_indices[s]) == (0, 1)]
    assert len(users) == 2
    assert info == "block (0, 1): 2 program(s) in this slice use it"


def test_a_selection_set_from_python_moves_the_grid(page):
    # Compare / Step views select a program by setting the grid widget's `selection`.
    wb, tiling = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload())
    page.evaluate("window.model.set('selection', {step: 7, program: [1, 0, 1], source: 'compare'})")
    assert page.locator(".pl-grid").get_attribute("data-step") == "7"
    assert page.locator(".pl-info .pl-program").inner_text() == f"program {tiling.program_at(7)}"


def test_a_program_pointed_at_in_the_pipeline_lights_up_in_the_grid(page):
    wb, _ = case("matmul_f32")
    payload = wb.grid().payload()
    mount(page, "grid.js", payload)
    page.evaluate("""(p) => window.dispatchEvent(new CustomEvent('pallaslab:program', {detail:
        {kernel: p.kernel, index: p.index, step: 5, program: [0, 2, 1], source: 'pipeline'}}))""",
                  {"kernel": payload["kernel"], "index": payload["index"]})
    assert page.locator(".pl-grid").get_attribute("data-hover") == "5"
    # another kernel's program is not this grid's business
    page.evaluate("""() => window.dispatchEvent(new CustomEvent('pallaslab:program', {detail:
        {kernel: 'other', index: 3, step: 9, program: [1, 1, 1], source: 'pipeline'}}))""")
    assert page.locator(".pl-grid").get_attribute("data-hover") == "5"


def _empty_grid_workbench():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from kernels import add_kernel

    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name="empty", grid=(0,), in_specs=[spec, spec],
                              out_specs=spec)(x, x)

    return pallaslab.Workbench(pallaslab.capture(fn, jax.ShapeDtypeStruct((16, 128),
                                                                          jnp.float32)))


def test_a_grid_with_no_programs_says_so(page):
    wb = _empty_grid_workbench()
    mount(page, "grid.js", wb.grid().payload())  # the page fixture fails on any page error
    root = page.locator(".pl-grid")
    assert root.get_attribute("data-programs") == "0"
    assert "no programs" in page.locator(".pl-grid .pl-empty-grid").inner_text()
    assert page.locator(".pl-grid .pl-finding code", has_text="empty-grid").count() == 1
    assert page.locator("canvas[data-role=grid]").count() == 0
    # a selection pushed from Python (another view) is ignored, not a crash
    page.evaluate("window.model.set('selection', {step: 0, program: [0]})")
    assert page.evaluate("window.cleanup(), document.querySelector('.pl-grid')") is None


def test_the_report_of_a_grid_with_no_programs_mounts_every_tab(page, tmp_path):
    wb = _empty_grid_workbench()
    path = tmp_path / "empty.html"
    path.write_text(wb.report(title="empty"), encoding="utf-8")
    page.allowed.add(path.as_uri())
    page.goto(path.as_uri())
    page.wait_for_selector("#pl-root[data-ready=true]", timeout=20000)
    first = page.locator("section.pl-kernel").first
    tabs = first.locator(".pl-tabs button").evaluate_all("(bs) => bs.map((b) => b.dataset.tab)")
    assert {"overview", "grid", "pipeline"} <= set(tabs)
    for tab in tabs:
        first.locator(f".pl-tabs button[data-tab={tab}]").click()
        first.locator(f".pl-pane[data-tab={tab}] > *").first.wait_for(timeout=10000)
    first.locator(".pl-tabs button[data-tab=grid]").click()
    assert "no programs" in first.locator(".pl-pane[data-tab=grid] .pl-empty-grid").inner_text()
    assert page.errors == []


def test_operands_are_labelled_by_parameter_and_origin(page):
    """Issue 10 item 4: panels and the block table say "x_ref (args[0])"; with the caller's
    expressions known, "x_ref (args[0] = x)"."""
    from kernels import matmul, rand

    from pallaslab.workbench import Workbench

    wb = Workbench(pallaslab.capture(matmul, rand((512, 256)), rand((256, 384), seed=1)),
                   options={"arg_names": ["x", "w.T"]})
    mount(page, "grid.js", wb.grid().payload())
    titles = page.locator(".pl-operand h4 .pl-label").all_inner_texts()
    assert titles == ["x_ref (args[0] = x)", "y_ref (args[1] = w.T)", "o_ref (outputs)"]
    cells = page.locator("table.pl-blocks tr[data-origin] td.pl-label").all_inner_texts()
    assert cells == titles
    mount(page, "overview.js", wb.overview().payload())
    rows = page.locator("table.pl-table tr[data-origin] td:first-child").all_inner_texts()
    assert rows == ["x_ref (args[0] = x)", "y_ref (args[1] = w.T)", "o_ref (outputs)",
                    "acc_ref (scratch[0])"]


def scrub(page, step):
    page.evaluate("""(s) => { const r = document.querySelector('input.pl-scrubber');
        r.value = String(s); r.dispatchEvent(new Event('input')); }""", step)


def test_matmul_output_is_written_back_at_the_last_k_not_at_k0(page):
    """Issue 10 item 10: the output block (i, j) stays in VMEM over k and is written back at
    the last k; the inputs are fetched where their block index changes."""
    wb, tiling = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload())
    for step in range(tiling.programs):
        scrub(page, step)
        _i, _j, k = tiling.program_at(step)
        row = page.locator('table.pl-blocks tr[data-origin="outputs"]')
        assert row.get_attribute("data-copy") == ("write" if k == 1 else "revisit"), step
        assert row.locator(".pl-tag").text_content() == ("write-back" if k == 1 else "in VMEM")
        x = page.locator('table.pl-blocks tr[data-origin="args[0]"]')
        assert x.get_attribute("data-copy") == "fetch"  # (i, k) changes at every step
    # the grid's copy overlay counts the write-back where it happens: 2 inputs at k = 0,
    # 2 inputs + the output at k = 1
    per_step = page.evaluate("Array.from(new window.view.Tiling(window.payload)"
                             ".fetchingPerStep())")
    assert per_step == [3 if tiling.program_at(s)[2] == 1 else 2
                        for s in range(tiling.programs)]


def writes(page, o):
    return page.evaluate("""([o]) => Array.from(new window.view.Tiling(window.payload)
        .counts(o, 'writes'))""", [o])


def coverage_rgb(page, origin, fx, fy):
    page.select_option("select.pl-overlay", "coverage")
    box = page.locator(f'.pl-operand[data-origin="{origin}"] canvas').first.bounding_box()
    return pixel(page, origin, box["width"] * fx, box["height"] * fy, layer=0)[:3]


def css_rgb(page, name):
    return page.evaluate(f"window.view.rgb(getComputedStyle(document.querySelector('.pl-grid'))"
                         f".getPropertyValue('{name}'))")


def warmth(rgb):
    return rgb[0] - rgb[2]


@pytest.mark.parametrize("name", ["matmul_f32", "reduction_revisited_output"])
def test_coverage_counts_write_backs_not_programs(page, name):
    """A correct reduction revisits its output block over consecutive steps: one write-back
    per block, painted as written once (no "several" without a finding to say so)."""
    wb, tiling = case(name)
    payload = wb.grid().payload()
    assert not [f for f in payload["findings"]
                if f["code"] in ("output-revisit", "parallel-write-conflict")]
    mount(page, "grid.js", payload)
    o = list(tiling.operands).index("outputs")
    assert set(writes(page, o)) == {1}
    once = coverage_rgb(page, "outputs", 0.5, 0.5)
    assert warmth(once) < warmth(css_rgb(page, "--pl-warn")) / 2, once


def test_coverage_paints_several_writers_where_a_finding_says_so(page):
    # output blocks 0, 1, 0, 1: each written back twice (output-revisit)
    wb, tiling = case("output_revisit_clobber")
    payload = wb.grid().payload()
    assert any(f["code"] == "output-revisit" for f in payload["findings"])
    mount(page, "grid.js", payload)
    o = list(tiling.operands).index("outputs")
    assert writes(page, o) == [2, 2]
    several = coverage_rgb(page, "outputs", 0.5, 0.25)
    assert warmth(several) > 0 and several != css_rgb(page, "--pl-error")
    # every program adds into block (0, 0) along a "parallel" axis: concurrent writers
    wb, tiling = case("racy_parallel_accumulate")
    payload = wb.grid().payload()
    out = next(op for op in payload["operands"] if op["origin"] == "outputs")
    assert out["writer_axes"] == [0]
    mount(page, "grid.js", payload)
    o = list(tiling.operands).index("outputs")
    assert writes(page, o) == [tiling.programs]
    assert warmth(coverage_rgb(page, "outputs", 0.5, 0.5)) > 0


def _ragged_rows(x_hbm, o_hbm):
    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    # 40 rows from HBM in BoundedSlice windows of at most 16: 16, 16 and 8 rows
    spec = pl.BlockSpec((pl.BoundedSlice(16), 128),
                        lambda i: (pl.ds(i * 16, jnp.minimum(16, 40 - i * 16)), 0))
    pltpu.emit_pipeline(double, grid=(3,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)


def test_bounded_slice_windows_are_drawn_with_each_steps_own_size(page):
    """pl.BoundedSlice windows copied from HBM: each step's element range and copy follow
    its own slice size (16, 16, 8 rows), not the window's bound."""
    def fn(x):
        return pl.pallas_call(_ragged_rows, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                              out_specs=pl.BlockSpec(memory_space=pl.ANY))(x)

    wb = pallaslab.inspect(fn, jnp.ones((40, 128), jnp.float32))
    [nested] = wb.grid().payload()["pipelines"]
    mount(page, "grid.js", nested["payload"])
    ranges = []
    for step in range(3):
        scrub(page, step)
        ranges.append(page.locator('table.pl-blocks tr[data-origin="args[0]"] .pl-range')
                      .inner_text())
    assert ranges == ["[0:16, 0:128]", "[16:32, 0:128]", "[32:40, 0:128]"]
    assert shown_blocks(page)["args[0]"] == ["32,0", "fetch"]


def test_overlay_shows_what_the_program_touches_inside_its_blocks(page, results_dir):
    """Issue 27 item 4: a strided load and a masked store, painted inside the blocks and said
    in words; masked-off lanes differ from both touched and untouched elements."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
    from test_block_accesses import strided_masked

    wb = pallaslab.inspect(strided_masked, jnp.ones((16, 128), jnp.float32))
    payload = wb.grid().payload()
    mount(page, "grid.js", payload)
    said = page.locator(".pl-info .pl-accesses-line").inner_text()
    assert said == payload["accesses"]["text"][0]
    assert "writes o_ref[0:4, 0:64] where mask (256 masked off)" in said
    top = page.locator('.pl-operand[data-origin="outputs"] canvas').nth(1)
    assert int(top.get_attribute("data-accesses")) > 0
    box = top.bounding_box()
    w, h = box["width"], box["height"]  # (16, 128): program 0's block is the upper half
    written = pixel(page, "outputs", w * 0.2, h * 0.1)  # rows 0..3, cols 0..63
    masked = pixel(page, "outputs", w * 0.2, h * 0.4)  # rows 4..7, cols 0..63: masked off
    untouched = pixel(page, "outputs", w * 0.8, h * 0.1)  # cols 64.. of the block
    assert written != untouched and masked != untouched and written != masked
    legend = page.locator(".pl-legend").inner_text()
    assert "masked off (not touched)" in legend
    page.screenshot(path=str(results_dir / "grid-accesses.png"))
    page.click("button.pl-next")
    assert page.locator(".pl-info .pl-accesses-line").inner_text() == \
        payload["accesses"]["text"][1]


def test_untouched_cells_are_dark_in_the_dark_theme_even_drawn_detached(page):
    """Issue 39 item 6: JupyterLab renders an output before attaching it; the grid kept the
    light theme's fallback colours, so its untouched cells were light grey on a dark page."""
    wb, _ = case("matmul_f32")
    mount(page, "grid.js", wb.grid().payload(), dark=True)
    page.evaluate("""() => {
        const el = document.createElement("div");  // detached, as JupyterLab renders
        window.cleanup();
        document.getElementById("root").replaceChildren();
        window.cleanup = window.view.default.render({model: window.model, el});
        document.getElementById("root").append(el);
    }""")
    page.wait_for_timeout(100)
    canvas = page.locator("canvas[data-role=grid]").first
    cell = float(canvas.get_attribute("data-cell"))
    # cell (row 2, column 1): a program not yet run at step 0, in the untouched colour
    rgba = page.evaluate("""(cell) => {
        const c = document.querySelector(".pl-programs canvas");  // the base layer
        const d = window.devicePixelRatio || 1;
        return Array.from(c.getContext("2d").getImageData(
            1.5 * cell * d, 2.5 * cell * d, 1, 1).data); }""", cell)
    r, g, b = rgba[:3]
    assert rgba[3] == 255 and 0.2126 * r + 0.7152 * g + 0.0722 * b < 90, rgba  # dark
