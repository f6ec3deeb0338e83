"""The Compare view: pure payload, mismatches traced to programs, static forms, tab, links."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from compared import wrong_comparison
from jax.experimental import pallas as pl
from kernels import CATALOG, scale_kernel, shifted_block_reference

import pallaslab
from pallaslab.views import compare_payload as compare_payload_module
from pallaslab.views import registry
from pallaslab.views.compare import attach_comparison, compare_payload, compare_workbench
from pallaslab.views.report import encode_buffers, script_json

EVIL = '<img src=x onerror="alert(1)">&</script>'
EVIL_ESCAPED = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&lt;/script&gt;"


@pytest.fixture(scope="module")
def wrong():
    return wrong_comparison()


def test_payload_names_exactly_the_wrong_block_and_the_program_that_wrote_it(wrong):
    wb, view, x = wrong
    ctx = wb.context(0)
    p = compare_payload(view.comparison, ctx.kernel, ctx.tiling)
    assert p["executors"] == ["interpret", "reference"] and not p["allclose"]
    (out,) = p["outputs"]
    assert out["origin"] == "outputs" and out["shape"] == [256, 128]
    assert out["block"] == [64, 128] and (out["rows"], out["cols"]) == (256, 128)
    (pair,) = out["pairs"]
    assert (pair["a"], pair["b"], pair["allclose"]) == ("interpret", "reference", False)
    assert pair["mismatched_elements"] == 64 * 128
    (block,) = pair["blocks"]
    assert block["block"] == [2, 0] and block["programs"] == [[2]] and block["steps"] == [2]
    assert block["window"] == [128, 192, 0, 128]
    # the heatmap is |a - b| cell by cell, the mask marks exactly the rows of block (2, 0)
    heat = np.frombuffer(p["tables"][pair["heat"]], "<f4").reshape(256, 128)
    mask = np.frombuffer(p["tables"][pair["mask"]], np.uint8).reshape(256, 128)
    np.testing.assert_allclose(heat[128:192], np.abs(2 * x[192:] - 2 * x[128:192]), rtol=1e-6)
    assert not heat[:128].any() and not heat[192:].any()
    assert mask[128:192].all() and mask.sum() == 64 * 128
    assert heat.max() == pytest.approx(pair["max_abs_err"], rel=1e-6)
    assert p["selected"] == [0, 0] and p["opened"] is None
    # binary buffers on the wire, never lists
    assert all(isinstance(t, memoryview) for t in p["tables"])
    assert "<" not in script_json(encode_buffers(p)).replace("\\u003c", "")


def test_big_outputs_are_downsampled_by_max_keeping_the_mismatch(monkeypatch):
    fn, args = CATALOG["matmul_f32"].case()
    x, y = (np.asarray(a) for a in args)
    wrong = x @ y
    wrong[130, 260] += 1.0  # inside output block (1, 2)
    wb = pallaslab.inspect(fn, *args)
    comparison = attach_comparison(wb, executors=("interpret", "reference"),
                                   reference=lambda a, b: jnp.asarray(wrong))
    monkeypatch.setattr(compare_payload_module, "HEAT_SIDE", 64)
    ctx = wb.context(0)
    p = compare_payload(comparison, ctx.kernel, ctx.tiling)
    out = p["outputs"][0]
    assert out["shape2"] == [512, 384] and out["factor"] == [8, 6]
    assert (out["rows"], out["cols"]) == (64, 64)
    pair = out["pairs"][0]
    mask = np.frombuffer(p["tables"][pair["mask"]], np.uint8).reshape(64, 64)
    assert np.argwhere(mask).tolist() == [[130 // 8, 260 // 6]]
    heat = np.frombuffer(p["tables"][pair["heat"]], "<f4").reshape(64, 64)
    assert heat[130 // 8, 260 // 6] == heat.max() == pytest.approx(1.0, rel=1e-3)
    (block,) = pair["blocks"]
    assert block["block"] == [1, 2] and block["programs"] == [[1, 2, 0], [1, 2, 1]]


def test_reduce_to_2d_and_downsample_are_exact():
    from pallaslab.views.arrays import downsample, to_2d

    x = np.arange(24.0).reshape(2, 3, 4)
    two, note = to_2d(x, squeeze=False)
    np.testing.assert_array_equal(two, x.max(axis=0))
    assert note == "max over the leading 1 dim(s)"
    assert to_2d(np.arange(5.0), squeeze=False)[0].shape == (1, 5)
    assert to_2d(np.float32(3), squeeze=False)[0].shape == (1, 1)
    cells, factor = downsample(np.arange(10.0).reshape(2, 5), 2, "max")
    assert factor == (1, 3) and cells.tolist() == [[2.0, 4.0], [7.0, 9.0]]
    cells, _ = downsample(np.array([[1.0, np.nan, 3.0]]), 2, "mean")
    assert cells.tolist() == [[1.0, 3.0]]


def test_text_and_html_show_the_summary_and_the_mismatch_table(wrong):
    _, view, _ = wrong
    text = view.to_text()
    assert "Compare interpret, reference for kernel 0 scale_kernel: MISMATCH" in text
    # one row per pair (a, b, max abs, max rel, ULP, mismatched, allclose), then the blocks
    assert re.search(r"^    interpret +reference +\S+ +\S+ +\S+ +8,192 +no$", text, re.M)
    assert "    interpret vs reference  (2, 0)  (2,)" in text
    html = view.to_html()
    assert "<th>max abs err</th>" in html.replace(' class="num"', "")
    assert "<td>(2, 0)</td><td>(2,)</td>" in html
    assert 'class="pl-cmp-bad-block"' in html  # the static block map marks block (2, 0)
    bundle = view._repr_mimebundle_()
    assert "text/plain" in bundle and "Compare" in bundle["text/html"]


def test_user_strings_are_escaped():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=EVIL, grid=(2,), in_specs=[spec], out_specs=spec)(x)

    x = jnp.ones((16, 128), jnp.float32)
    wb = pallaslab.inspect(fn, x)
    view = compare_workbench(wb, executors=("interpret", "reference"),
                             reference=lambda x: 3 * x)
    wb.step().step()
    for html in (view.to_html(), wb.step().to_html(), view._repr_mimebundle_()["text/html"]):
        assert EVIL not in html and EVIL_ESCAPED in html
    assert "<img" not in view.to_html()
    assert EVIL not in script_json(encode_buffers(view.payload()))


def test_compare_tab_appears_once_a_comparison_is_attached():
    assert registry.tab("compare").title == "Compare" and registry.tab("step").title == "Step"
    fn, args = CATALOG["elementwise_2d_add"].case()
    wb = pallaslab.inspect(fn, *args)
    assert "compare" not in [t.name for t in wb.tabs()]
    with pytest.raises(pallaslab.PallasLabError, match="Compare view is not available"):
        wb.compare()
    comparison = attach_comparison(wb, executors=("interpret", "reference"),
                                   reference=lambda x, y: x + y)
    assert comparison.allclose
    names = [t.name for t in wb.tabs()]
    assert names.index("grid") < names.index("compare") < names.index("step")
    assert wb.compare().comparison is comparison
    assert "all close" in wb.compare().to_text()


def test_opening_a_program_steps_to_it_and_selects_it_in_the_grid(wrong):
    pytest.importorskip("anywidget")
    wb, view, x = wrong
    grid = wb.grid().widget  # the grid tab, as shown
    widget = view.widget
    assert widget.payload["interactive"]
    widget.selection = {"action": "open", "program": [2], "nonce": 1}
    step = wb.step()
    assert step.stepper.program == (2,) and step.stepper.position == 3
    assert grid.selection["step"] == 2 and grid.selection["program"] == [2]
    assert widget.payload["opened"] == [2] and widget.payload["revision"] >= 1
    # the step view's widget sees the same stepper; its output block is the wrong one
    blocks = step.stepper.blocks()
    np.testing.assert_array_equal(blocks["outputs"].written, 2 * x[192:])
    assert blocks["args[0]"].block_index == (3, 0)
    # no workbench widget shown: the note says only what happened
    assert widget.payload["opened_note"] == ("stepper at program (2,) (3/4 programs run): "
                                             "selected in the Grid view")


def test_opening_in_a_shown_workbench_switches_to_step_and_selects_the_unopened_grid_tab():
    """Issue 10 (7): the workbench opened on Compare, its Grid tab never opened."""
    pytest.importorskip("anywidget")
    from pallaslab.workbench import Workbench

    fn, args = CATALOG["shifted_block_wrong"].case()
    wb = Workbench(pallaslab.capture(fn, *args), tab="compare")
    attach_comparison(wb, executors=("interpret", "reference"),
                      reference=shifted_block_reference)
    tabs = wb.widget.children[0].children[-1]  # shown: the workbench's Tab widget
    titles = list(tabs.titles)
    assert tabs.selected_index == titles.index("Compare")
    grid = wb.grid()
    assert "widget" not in grid.__dict__  # the Grid tab was not opened
    compare = wb.compare()
    compare.widget.selection = {"action": "open", "program": [2], "nonce": 1}
    assert tabs.selected_index == titles.index("Step")
    step_box = tabs.children[titles.index("Step")]
    assert step_box.children == (wb.step().widget,)
    assert wb.step().widget.payload["program"] == [2]
    assert grid.widget.selection["step"] == 2  # made now: the Grid tab opens on it
    assert tabs.children[titles.index("Grid")].children == ()  # not shown until opened
    assert compare.widget.payload["opened_note"] == (
        "stepper at program (2,) (3/4 programs run): shown in the Step tab and selected in "
        "the Grid tab")
    # a failed open says so and claims nothing
    compare.widget.selection = {"action": "open", "program": [9], "nonce": 2}
    assert compare.widget.payload["error"] and compare.widget.payload["opened"] == [2]


# --- honest verdicts: each executor's status, the verdict line, the runs' findings ----------

TIMED_OUT = ("reference stopped by its time limit of 5 s, while running program (2,) of "
             "scale_kernel after 5.0 s")


def _variant(comparison, *, results=None, pairs_close=None):
    """`comparison` with some run results replaced (and, when fewer than two ran, no pairs)."""
    import dataclasses

    from pallaslab.execute import Comparison

    results = tuple(results or comparison.results)
    ran = [r for r in results if r.status == "ran"]
    outputs = comparison.outputs
    if len(ran) < 2:
        outputs = tuple(dataclasses.replace(o, pairs=()) for o in outputs)
    elif pairs_close:
        outputs = tuple(dataclasses.replace(o, pairs=tuple(
            dataclasses.replace(p, allclose=True, mismatched_elements=0, mismatched_blocks=(),
                                programs=(), mismatch=np.zeros_like(p.mismatch))
            for p in o.pairs)) for o in outputs)
    return Comparison(comparison.executors, results, outputs, comparison.kernels)


@pytest.fixture(scope="module")
def timed_out(wrong):
    import dataclasses

    _, view, _ = wrong
    c = view.comparison
    ref = dataclasses.replace(c.result("reference"), outputs=None, timed_out=TIMED_OUT,
                              notes=("ran in a worker process, killed at the limit",))
    return _variant(c, results=(c.result("interpret"), ref))


def _view_of(wb, comparison):
    from pallaslab.views.compare import CompareView

    return CompareView(wb.context(0), comparison)


def test_an_incomplete_comparison_says_incomplete_and_why_never_mismatch(wrong, timed_out):
    wb, _, _ = wrong
    view = _view_of(wb, timed_out)
    assert not timed_out.complete and not timed_out.allclose
    text = view.to_text()
    head = text.splitlines()[0]
    assert head.startswith("Compare interpret, reference for kernel 0 scale_kernel: "
                           "INCOMPLETE: only 1 of 2 executor(s) ran")
    assert "MISMATCH" not in text
    assert re.search(r"^  interpret +ran +\S+ +-$", text, re.M)
    assert re.search(rf"^  reference +timed-out +- +{re.escape(TIMED_OUT)}; ran in a worker "
                     "process, killed at the limit$", text, re.M)
    assert "  incomplete: nothing compared: fewer than two executors ran." in text
    html = view.to_html()
    assert 'data-outcome="incomplete"' in html and "INCOMPLETE: only 1 of 2" in html
    assert "mismatch</span>" not in html
    assert "<td>reference</td><td>timed-out</td><td>-</td>" in html.replace(' class="num"', "")
    assert TIMED_OUT in html
    p = view.payload()
    assert (p["complete"], p["allclose"], p["passed"], p["outcome"]) == (
        False, False, False, "incomplete")
    assert p["verdict"] == timed_out.verdict()
    runs = {r["executor"]: r for r in p["runs"]}
    assert runs["reference"]["status"] == "timed-out"
    assert runs["reference"]["reason"] == runs["reference"]["timed_out"] == TIMED_OUT
    assert runs["reference"]["notes"] == ["ran in a worker process, killed at the limit"]
    assert runs["interpret"]["status"] == "ran" and runs["interpret"]["reason"] is None


def test_an_unavailable_executor_is_named_with_its_reason(wrong):
    import dataclasses

    wb, view, _ = wrong
    c = view.comparison
    why = "no TPU or GPU is attached (jax.devices() lists only cpu)"
    dev = dataclasses.replace(c.result("reference"), executor="device", outputs=None,
                              unavailable=why)
    c2 = _variant(c, results=(c.result("interpret"), dev))
    v = _view_of(wb, c2)
    assert re.search(rf"^  device +unavailable +- +{re.escape(why)}$", v.to_text(), re.M)
    assert "<td>device</td><td>unavailable</td>" in v.to_html()
    assert {r["executor"]: r["status"] for r in v.payload()["runs"]} == {
        "interpret": "ran", "device": "unavailable"}


def test_run_findings_are_shown_and_all_close_with_errors_is_not_a_pass(wrong):
    import dataclasses

    from pallaslab.analysis.findings import Finding

    wb, view, _ = wrong
    c = view.comparison
    unwritten = Finding("unwritten-output", "error",
                        "outputs: 1,024 element(s) were written by no program (block (3, 0))",
                        operand="outputs", programs=(), blocks=((3, 0),))
    race = Finding("data-race", "error", "programs (0,) and (1,) write outputs block (0, 0)",
                   operand="outputs", programs=((0,), (1,)))
    interp = dataclasses.replace(c.result("interpret"), findings=(unwritten, race))
    c2 = _variant(c, results=(interp, c.result("reference")), pairs_close=True)
    assert c2.allclose and not c2.passed
    v = _view_of(wb, c2)
    text = v.to_text()
    assert text.splitlines()[0].endswith(
        ": all close, but the runs found errors: data-race, unwritten-output")
    assert ("    interpret: error unwritten-output (outputs): outputs: 1,024 element(s) were "
            "written by no program (block (3, 0))") in text
    assert "interpret: error data-race (outputs)" in text
    html = v.to_html()
    assert 'data-outcome="errors"' in html and "<code>unwritten-output</code>" in html
    assert "<code>data-race</code>" in html
    p = v.payload()
    assert (p["allclose"], p["passed"], p["outcome"]) == (True, False, "errors")
    assert [(f["executor"], f["code"], f["operand"]) for f in p["findings"]] == [
        ("interpret", "unwritten-output", "outputs"), ("interpret", "data-race", "outputs")]
    assert p["findings"][1]["programs"] == [[0], [1]]


def test_a_mismatch_and_a_pass_keep_their_verdicts(wrong):
    wb, view, _ = wrong
    p = view.payload()
    assert (p["outcome"], p["verdict"], p["complete"]) == ("mismatch", "MISMATCH", True)
    assert 'data-outcome="mismatch"' in view.to_html()
    ok = _view_of(wb, _variant(view.comparison, pairs_close=True))
    assert ok.payload()["outcome"] == "pass"
    assert ok.to_text().splitlines()[0].endswith(": all close")
    assert '<span class="pl-ok pl-cmp-verdict" data-outcome="pass">all close</span>' in \
        ok.to_html()


def test_verdict_strings_in_the_payload_are_shown_visibly(wrong, timed_out):
    import dataclasses

    wb, _, _ = wrong
    bidi = "stopped \u202eevil\x1b[2J"
    ref = dataclasses.replace(timed_out.result("reference"), timed_out=bidi, notes=(bidi,))
    c2 = _variant(timed_out, results=(timed_out.result("interpret"), ref))
    v = _view_of(wb, c2)
    p = v.payload()
    runs = {r["executor"]: r for r in p["runs"]}
    for s in (runs["reference"]["reason"], runs["reference"]["notes"][0], p["verdict"]):
        assert "\u202e" not in s and "\x1b" not in s and "<U+202E>" in s
    assert "\u202e" not in v.to_text() and "\u202e" not in v.to_html()


def test_timeout_reaches_the_comparison(monkeypatch):
    import inspect

    import pallaslab.execute as execute

    for fn in (attach_comparison, compare_workbench):
        assert inspect.signature(fn).parameters["timeout"].default is None
    seen = []
    real = execute.compare

    def spy(*args, **kwargs):
        seen.append(kwargs.get("timeout"))
        return real(*args, **kwargs)

    monkeypatch.setattr(execute, "compare", spy)
    fn, args = CATALOG["elementwise_2d_add"].case()
    wb = pallaslab.inspect(fn, *args)
    view = compare_workbench(wb, executors="interpret,reference",
                             reference=lambda x, y: x + y, timeout=120)
    assert seen == [120] and view.comparison.complete
    attach_comparison(wb, executors=("interpret", "reference"),
                      reference=lambda x, y: x + y, timeout=60.5)
    wb.view("compare", executors=("interpret", "reference"), reference=lambda x, y: x + y,
            timeout=30)
    assert seen == [120, 60.5, 30]


# --- the kernel's static errors, warnings, NaN counts and integer outputs in every form -----


def _reverse(x):
    spec = pl.BlockSpec((64, 128), lambda i: (-1 - i, 0))  # negative: out of bounds on TPU
    return pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(4,), in_specs=[spec],
                          out_specs=pl.BlockSpec((64, 128), lambda i: (i, 0)))(x)


def test_static_errors_are_findings_of_the_view_and_fail_it():
    x = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
    wb = pallaslab.inspect(_reverse, x)
    view = compare_workbench(wb, executors=("vectorized", "reference"), reference=lambda x: (
        2.0 * x.reshape(4, 64, 128)[::-1].reshape(256, 128)))
    head = view.to_text().splitlines()[0]
    assert head.endswith(": all close, but static analysis found errors: block-out-of-bounds")
    assert ("    static analysis: error block-out-of-bounds (args[0]): args[0]: 4 program(s) use "
            "a block outside the array") in view.to_text()
    p = view.payload()
    assert (p["allclose"], p["passed"], p["outcome"]) == (True, False, "errors")
    assert [(f["executor"], f["code"]) for f in p["findings"]] == [
        ("static analysis", "block-out-of-bounds")]
    html = view.to_html()
    assert 'data-outcome="errors"' in html and "<code>block-out-of-bounds</code>" in html


def _pair_variant(comparison, **changes):
    import dataclasses

    return dataclasses.replace(comparison, outputs=tuple(dataclasses.replace(o, pairs=tuple(
        dataclasses.replace(p, **changes) for p in o.pairs)) for o in comparison.outputs))


def test_nan_mismatches_read_nan_with_counts_per_side_and_warnings_are_shown(wrong):
    wb, view, _ = wrong
    nan = _pair_variant(view.comparison, max_abs_err=np.inf, max_rel_err=np.inf,
                        max_ulp=2**31 - 1, nan_a=8192, nan_b=0,
                        rounding_note="12.0% of the elements differ by more than 4 ULP")
    v = _view_of(wb, nan)
    text = v.to_text()
    assert re.search(r"^    interpret +reference +nan +nan +- +8,192 / 0 +8,192 +no$", text, re.M)
    assert "inf" not in text.replace("info", "")
    html = v.to_html().replace(' class="num"', "")
    assert ('<td>nan</td><td>nan</td><td>-</td><td>8,192 / 0</td><td>8,192</td><td><span '
            'class="pl-cmp-bad">no</span></td>') in html
    p = v.payload()
    pair = p["outputs"][0]["pairs"][0]
    assert (pair["nan_a"], pair["nan_b"], p["outputs"][0]["floating"]) == (8192, 0, True)
    # (the note is kept on mismatching pairs in this hand-made variant: shown as given)
    assert p["warnings"] == ["outputs: interpret vs reference: 12.0% of the elements differ by "
                             "more than 4 ULP"]
    assert "  warning: outputs: interpret vs reference: 12.0% of the elements" in text
    assert ('class="pl-finding pl-warning pl-cmp-warning"><span class="pl-badge">warning</span> '
            "outputs: interpret vs reference") in v.to_html()


def _twice(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def test_integer_outputs_show_no_ulp():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(_twice, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[spec], out_specs=spec)(x)

    x = jnp.arange(16 * 128, dtype=jnp.int32).reshape(16, 128)
    wb = pallaslab.inspect(fn, x)
    view = compare_workbench(wb, executors=("interpret", "reference"),
                             reference=lambda x: 2 * x + 1)
    assert re.search(r"^    interpret +reference +1 +1 +- +2,048 +no$", view.to_text(), re.M)
    assert view.payload()["outputs"][0]["floating"] is False


def test_an_executor_named_that_did_not_run_is_said_although_two_ran(wrong):
    import dataclasses

    wb, view, _ = wrong
    c = view.comparison
    dev = dataclasses.replace(c.result("reference"), executor="device", outputs=None,
                              unavailable="no TPU or GPU is attached")
    c3 = dataclasses.replace(c, executors=(*c.executors, "device"),
                             results=(*c.results, dev),
                             required=("interpret", "reference", "device"))
    c3 = _pair_variant(c3, allclose=True, mismatched_elements=0, mismatched_blocks=(),
                       programs=())
    v = _view_of(wb, c3)
    assert v.payload()["outcome"] == "incomplete"
    assert ("  incomplete: device did not run; only interpret, reference were compared."
            in v.to_text())
    assert v.to_text().splitlines()[0].endswith(
        "INCOMPLETE: device did not run, so the kernel was not checked against it: device: "
        "unavailable (no TPU or GPU is attached); only interpret and reference were compared")
