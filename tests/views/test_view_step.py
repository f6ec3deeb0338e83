"""The Step view: pure payload from a real stepper, widget actions, static forms, the tab."""

from __future__ import annotations

import numpy as np
import pytest
from catalog import catalog_line
from kernels import CATALOG, shifted_block_reference

import pallaslab
from pallaslab.views.compare import attach_comparison
from pallaslab.views.report import encode_buffers, script_json
from pallaslab.views.step import StepView, step_payload, summarize

# The line of scale_kernel's body in the catalog (where its only equation comes from).
SCALE_LINE = catalog_line("o_ref[...] = x_ref[...] * 2.0")


@pytest.fixture(scope="module")
def wrong():
    fn, args = CATALOG["shifted_block_wrong"].case()
    return pallaslab.inspect(fn, *args), np.asarray(args[0])


def test_payload_before_any_program_is_cheap_and_empty(wrong):
    wb, _ = wrong
    ctx = wb.context(0)
    p = step_payload(ctx.kernel, ctx.tiling)
    assert (p["position"], p["step"], p["program"]) == (0, None, None)
    assert p["programs"] == 4 and p["grid"] == [4]
    assert p["blocks"] == [] and p["equations"] == [] and p["tables"] == []
    fresh = StepView(ctx)
    assert "no program has run yet" in fresh.to_text() and not fresh.started


def test_payload_of_program_2_shows_its_blocks_before_and_after(wrong):
    wb, x = wrong
    ctx = wb.context(0)
    fn, args = CATALOG["shifted_block_wrong"].case()
    st = pallaslab.step(fn, *args)
    st.goto((2,))
    p = step_payload(ctx.kernel, ctx.tiling, position=st.position, blocks=st.blocks(),
                     equations=st.equations(), mismatch_steps=[2], has_comparison=True)
    assert (p["position"], p["step"], p["program"]) == (3, 2, [2])
    by = {b["origin"]: b for b in p["blocks"]}
    # program (2,) reads input block 3 (the bug) and writes output block 2
    assert by["args[0]"]["block_index"] == [3, 0] and not by["args[0]"]["changed"]
    assert by["outputs"]["block_index"] == [2, 0] and by["outputs"]["changed"]
    out = by["outputs"]
    assert out["heat"] == {"rows": 64, "cols": 128, "shape": [64, 128], "factor": [1, 1],
                           "note": None}
    before = np.frombuffer(p["tables"][out["before"]], "<f4").reshape(64, 128)
    after = np.frombuffer(p["tables"][out["after"]], "<f4").reshape(64, 128)
    assert np.isnan(before).all()  # never written before this program
    np.testing.assert_array_equal(after, 2 * x[192:256])
    read = np.frombuffer(p["tables"][by["args[0]"]["before"]], "<f4").reshape(64, 128)
    np.testing.assert_array_equal(read, x[192:256])
    assert out["lo"] == pytest.approx(float((2 * x[192:]).min()))
    assert "8,192 NaN" in out["summary_before"]
    (eq,) = p["equations"]
    assert eq["primitive"] == "mul" and eq["source"] == SCALE_LINE
    assert eq["values"][0].startswith("float32[64,128] min ")
    assert p["mismatch_steps"] == [2] and p["has_comparison"]
    assert all(isinstance(t, memoryview) for t in p["tables"])
    json_text = script_json(encode_buffers(p))
    assert "</" not in json_text


def test_summaries_show_small_values_in_full_and_big_ones_as_statistics():
    assert summarize(np.float32(2.5)) == "float32 2.5"
    assert summarize(np.arange(3, dtype=np.int32)) == "int32[3] [0, 1, 2]"
    text = summarize(np.array([[1.0, np.nan] * 8] * 2, np.float32))
    assert text == "float32[2,16] min 1 max 1 mean 1 16 NaN"


def test_widget_actions_drive_the_stepper(wrong):
    pytest.importorskip("anywidget")
    wb, _ = wrong
    view = wb.step()
    w = view.widget
    assert w.payload["interactive"] and w.payload["position"] == 0
    nonce = iter(range(1, 100))

    def act(**sel):
        w.selection = {**sel, "nonce": next(nonce)}
        return w.payload

    assert act(action="step", n=1)["program"] == [0]
    assert act(action="step", n=2)["program"] == [2]
    p = act(action="back", n=1)
    assert p["program"] == [1] and p["position"] == 2
    assert act(action="goto", program=[3])["position"] == 4
    assert act(action="reset")["position"] == 0
    p = act(action="run_to_mismatch")
    assert p["position"] == 0 and "no comparison" in p["error"]
    assert act(action="goto", program=[9])["error"] == "program (9,) is outside the grid (4,)"
    revision = w.payload["revision"]
    w.selection = dict(w.selection)  # the same nonce again: ignored
    assert w.payload["revision"] == revision


def test_run_to_next_mismatch_stops_at_the_program_the_comparison_blamed(wrong):
    wb, _ = wrong
    attach_comparison(wb, executors=("interpret", "reference"),
                      reference=shifted_block_reference)
    view = wb.step().reset()
    assert view.mismatch_steps() == [2]
    view.run_to_mismatch()
    assert view.stepper.program == (2,) and view.error is None
    view.run_to_mismatch()
    assert view.stepper.program == (2,)
    assert view.error.startswith("no program after step 2 writes a mismatched block")
    text = view.to_text()
    assert "3/4 programs run, last program (2,) (step 2)" in text
    row = next(ln.split() for ln in text.splitlines() if "o_ref (outputs)" in ln)
    assert row[2:6] == ["output", "(2,", "0)", "yes"]  # its block, changed
    assert SCALE_LINE in text
    html = view.to_html()
    assert "<code>(2,)</code>" in html and "<td>mul" not in html  # equation text, not primitive
    assert SCALE_LINE in html


def test_step_tab_is_offered_where_the_stepper_can_run():
    fn, args = CATALOG["vector_add"].case()[:2]
    names = [t.name for t in pallaslab.inspect(fn, *args).tabs()]
    assert "step" in names
    fn, args = CATALOG["kernel_in_scan"].case()[:2]  # steps the first iteration's launch
    assert "step" in [t.name for t in pallaslab.inspect(fn, *args).tabs()]
    fn, args = CATALOG["kernel_in_shard_map"].case()[:2]
    assert "step" not in [t.name for t in pallaslab.inspect(fn, *args).tabs()]
