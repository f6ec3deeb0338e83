"""The Compare and Step views' ES modules in real Chromium, against an in-page fake model."""

from __future__ import annotations

import pytest
from catalog import catalog_line
from compared import explained, wrong_comparison
from harness import mount
from kernels import CATALOG

import pallaslab
from pallaslab.views.compare import compare_payload, compare_workbench


@pytest.fixture(scope="module")
def wrong():
    wb, view, _ = wrong_comparison()
    return wb, view


def click_element(page, row, col, output=0):
    """Click the heatmap where element (row, col) of the output's 2-D view is drawn."""
    canvas = page.locator(f"canvas.pl-cmp-heat[data-output='{output}']")
    cw = float(canvas.get_attribute("data-cell-w"))
    ch = float(canvas.get_attribute("data-cell-h"))
    box = canvas.bounding_box()
    page.mouse.click(box["x"] + (col + 0.5) * cw, box["y"] + (row + 0.5) * ch)


def test_clicking_the_mismatched_block_names_the_program_and_opens_it(page, wrong, results_dir):
    _, view = wrong
    mount(page, "compare.js", dict(view._payload(live=True)))
    row = page.locator("tr.pl-cmp-row").first
    assert row.locator("td").nth(6).inner_text() == "no"
    assert row.locator("td").nth(5).inner_text() == "8,192"
    # a matching block: no programs offered
    click_element(page, 10, 10)
    assert page.locator(".pl-cmp-picked").inner_text().endswith("block (0, 0): no mismatch")
    # the mismatched block (2, 0) holds rows 128..191
    click_element(page, 150, 40)
    picked = page.locator(".pl-cmp-picked")
    assert picked.get_attribute("data-block") == "2,0"
    programs = page.locator(".pl-cmp-program")
    assert programs.count() == 1 and programs.first.get_attribute("data-program") == "2"
    assert "program (2,)" in programs.first.inner_text()
    page.screenshot(path=str(results_dir / "compare-light.png"))
    page.locator("button.pl-cmp-open").click()
    saved = page.evaluate("window.model.saved")
    assert saved[-1]["action"] == "open" and saved[-1]["program"] == [2]
    # the mismatched cells are drawn in the error colour, matching ones are not
    colours = page.evaluate("""() => {
        const c = document.querySelector('canvas.pl-cmp-heat');
        const g = c.getContext('2d'), d = window.devicePixelRatio || 1;
        const cw = +c.dataset.cellW, ch = +c.dataset.cellH;
        const at = (r, q) => Array.from(
            g.getImageData((q + 0.5) * cw * d, (r + 0.5) * ch * d, 1, 1).data);
        return [at(160, 60), at(60, 60)];
    }""")
    bad, good = colours
    assert bad != good and bad[0] > bad[2]  # reddish where it mismatches


def test_static_report_mode_lists_programs_without_open_buttons(page, wrong, results_dir):
    _, view = wrong
    mount(page, "compare.js", view.payload(), dark=True)
    page.locator("button.pl-cmp-block").first.click()
    page.screenshot(path=str(results_dir / "compare-dark.png"))
    assert page.locator(".pl-cmp-program").first.get_attribute("data-program") == "2"
    assert page.locator("button.pl-cmp-open").count() == 0


def test_step_view_shows_the_program_its_blocks_and_equations(page, wrong, results_dir):
    wb, _ = wrong
    step = wb.step()
    step.goto((2,))
    mount(page, "step.js", dict(step._payload(live=True)))
    assert page.locator(".pl-step-program").inner_text() == "program (2,)"
    panels = page.locator("figure.pl-step-block")
    assert panels.count() == 2
    out = page.locator("figure.pl-step-block[data-origin='outputs']")
    assert out.get_attribute("data-changed") == "true"
    assert "8,192 NaN" in out.locator("[data-which=before] .pl-step-summary").inner_text()
    eq = page.locator("table.pl-step-eqns tr[data-index='0']")
    scale_line = catalog_line("o_ref[...] = x_ref[...] * 2.0")
    assert "mul" in eq.inner_text() and scale_line in eq.inner_text()
    # the comparison exists: "next mismatch" is offered only while a later program mismatches
    assert page.locator("button.pl-step-run_to_mismatch").is_disabled()
    page.screenshot(path=str(results_dir / "step-light.png"))
    page.locator("button.pl-step-step").click()
    page.locator("input.pl-step-goto-input").fill("(1,)")
    page.locator("button.pl-step-goto").click()
    saved = page.evaluate("window.model.saved")
    assert [s["action"] for s in saved] == ["step", "goto"] and saved[1]["program"] == [1]
    assert saved[0]["nonce"] != saved[1]["nonce"]
    # a new payload from Python redraws the view
    step.goto((1,))
    page.evaluate("(p) => window.model.set('payload', window.host.revive(p))",
                  _json(dict(step._payload(live=True))))
    assert page.locator(".pl-step-program").inner_text() == "program (1,)"
    assert not page.locator("button.pl-step-run_to_mismatch").is_disabled()


def test_step_controls_are_disabled_in_the_static_report(page, wrong, results_dir):
    wb, _ = wrong
    mount(page, "step.js", wb.step().payload(), dark=True)
    for action in ("reset", "back", "step", "play", "goto"):
        assert page.locator(f"button.pl-step-{action}").is_disabled(), action
    page.screenshot(path=str(results_dir / "step-dark.png"))


def _json(payload):
    import json

    from pallaslab.views.report import encode_buffers

    return json.loads(json.dumps(encode_buffers(payload)))


def test_step_view_of_a_grid_with_no_programs_says_there_is_nothing_to_step(page):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from kernels import scale_kernel

    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(0,), in_specs=[spec], out_specs=spec)(x)

    wb = pallaslab.inspect(fn, jnp.ones((16, 128), jnp.float32))
    step = wb.step()
    mount(page, "step.js", dict(step._payload(live=True)))
    text = page.locator(".pl-step").inner_text()
    assert "0 / 0 programs run" in text
    assert "press ▶" not in text
    assert page.locator(".pl-step-empty").inner_text() == (
        "The grid (0,) has no programs: there is nothing to step.")
    for action in ("reset", "back", "step", "play", "goto"):
        assert page.locator(f"button.pl-step-{action}").is_disabled(), action
    assert page.locator("canvas.pl-step-gridcanvas").count() == 0


def test_compare_widget_shows_statuses_verdict_and_findings(page, wrong):
    import dataclasses

    from pallaslab.analysis.findings import Finding
    from pallaslab.execute import Comparison
    from pallaslab.views.compare import CompareView

    wb, view = wrong
    # a real incomplete comparison: no accelerator here, so `device` cannot run
    fn, args = CATALOG["shifted_block_wrong"].case()
    wb2 = pallaslab.inspect(fn, *args)
    incomplete = compare_workbench(wb2, executors="interpret,device")
    assert not incomplete.comparison.complete
    mount(page, "compare.js", dict(incomplete._payload(live=True)))
    verdict = page.locator(".pl-cmp-verdict")
    assert verdict.get_attribute("data-outcome") == "incomplete"
    assert verdict.inner_text().startswith("INCOMPLETE: only 1 of 2 executor(s) ran")
    assert "mismatch" not in page.locator(".pl-head").inner_text().lower()
    runs = page.locator("tr.pl-cmp-run")
    assert runs.evaluate_all("rs => rs.map(r => [r.dataset.executor, r.dataset.status])") == [
        ["interpret", "ran"], ["device", "unavailable"]]
    reason = incomplete.comparison.result("device").reason
    assert reason and page.locator("tr.pl-cmp-run[data-executor=device] .pl-cmp-reason"
                                   ).inner_text() == reason
    assert page.locator(".pl-cmp-incomplete").count() == 1
    assert page.locator("tr.pl-cmp-row").count() == 0  # nothing compared, no pair rows

    # all close, but a run found unwritten output and a race: errors, not a pass
    c = view.comparison
    unwritten = Finding("unwritten-output", "error",
                        "outputs: 8 element(s) written by no program", operand="outputs")
    race = Finding("data-race", "error", "programs (0,) and (1,) race", operand="outputs")
    interp = dataclasses.replace(c.result("interpret"), findings=(unwritten, race),
                                 notes=("in-process: the time limit is soft",))
    close = tuple(dataclasses.replace(o, pairs=tuple(dataclasses.replace(
        p, allclose=True, mismatched_elements=0, mismatched_blocks=(), programs=())
        for p in o.pairs)) for o in c.outputs)
    both = (interp, c.result("reference"))
    errors = CompareView(wb.context(0), Comparison(c.executors, both, close, c.kernels))
    mount(page, "compare.js", dict(errors._payload(live=True)))
    verdict = page.locator(".pl-cmp-verdict")
    assert verdict.get_attribute("data-outcome") == "errors"
    assert verdict.inner_text() == (
        "all close, but the runs found errors: data-race, unwritten-output")
    codes = page.locator(".pl-cmp-findings li").evaluate_all(
        "ls => ls.map(l => [l.dataset.executor, l.dataset.code])")
    assert codes == [["interpret", "unwritten-output"], ["interpret", "data-race"]]
    assert "in-process: the time limit is soft" in page.locator(
        "tr.pl-cmp-run[data-executor=interpret] .pl-cmp-reason").inner_text()


def _explained_payload(wb, view):
    ctx = wb.context(0)
    return dict(compare_payload(explained(view.comparison), ctx.kernel, ctx.tiling))


def test_causes_are_listed_and_a_wrong_element_names_its_last_writer(page, wrong, results_dir):
    wb, view = wrong
    mount(page, "compare.js", _explained_payload(wb, view))
    cause = page.locator(".pl-cmp-causes .pl-cmp-cause")
    assert cause.get_attribute("data-kind") == "line"
    assert "all last written by kernels.py:390 in program (2,)" in cause.inner_text()
    click_element(page, 130, 5)
    writer = page.locator(".pl-cmp-writer")
    assert writer.get_attribute("data-program") == "2"
    assert writer.inner_text().startswith(
        "outputs element (130, 5) is wrong: last written by program (2,) at kernels.py:390")
    assert "that program read x_ref[" in writer.inner_text()
    page.screenshot(path=str(results_dir / "compare-writer.png"))
    click_element(page, 10, 10)  # a right element: its writer, not "wrong"
    assert page.locator(".pl-cmp-writer").inner_text().startswith(
        "outputs element (10, 10): last written by program (0,)")


def _luminance(rgba):
    r, g, b = rgba[:3]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_zero_error_reads_as_no_error_in_the_dark_theme_even_drawn_detached(page, wrong,
                                                                             results_dir):
    """Issue 26 item 5: JupyterLab renders a widget into an element not yet in the document;
    zero error was drawn in the light theme's fallback (near-white) on a dark page."""
    _, view = wrong
    mount(page, "compare.js", dict(view._payload(live=True)), dark=True)
    page.evaluate("""() => {
        const el = document.createElement("div");  // detached, as JupyterLab renders
        window.cleanup();
        document.getElementById("root").replaceChildren();
        window.view.default.render({model: window.model, el});
        document.getElementById("root").append(el);
    }""")
    page.wait_for_timeout(100)
    canvas = page.locator("canvas.pl-cmp-heat").first
    box = canvas.bounding_box()
    # element (10, 10) has zero error; block (2, 0) (rows 128..191) is wrong
    zero = page.screenshot(clip={"x": box["x"] + 12, "y": box["y"] + 12, "width": 1,
                                 "height": 1})
    from io import BytesIO

    from PIL import Image

    px = Image.open(BytesIO(zero)).convert("RGB").getpixel((0, 0))
    bg = page.evaluate("getComputedStyle(document.querySelector('.pl-compare'))"
                       ".getPropertyValue('--pl-bg')")
    assert _luminance(px) < 80, (px, bg)  # dark, like the page: "no error"
    page.screenshot(path=str(results_dir / "compare-dark-zero.png"))
