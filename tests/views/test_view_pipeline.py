"""The Pipeline view: event columns on the wire, aggregation of big grids, profile, text/HTML."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import copy_kernel_named, workbench
from kernels import elementwise_2d

import pallaslab
from pallaslab.analysis.pipeline import Pipeline, simulate
from pallaslab.views.pipeline import PipelineView
from pallaslab.views.pipeline_payload import BINS, MAX_EVENTS, WINDOW_EVENTS, pipeline_payload
from pallaslab.views.registry import tabs
from pallaslab.workbench import Workbench

S = jax.ShapeDtypeStruct
EVIL = '<img src=x onerror="alert(1)">&</script>'


def columns(track):
    return {"lane": np.frombuffer(track["lane"], np.uint8),
            "kind": np.frombuffer(track["kind"], np.uint8),
            "start": np.frombuffer(track["start"], "<f8"),
            "end": np.frombuffer(track["end"], "<f8"),
            "program": np.frombuffer(track["program"], "<i4")}


def test_four_step_grid_payload_exact():
    # The pipeline model's hand-checked 4-step case (tests/analysis/test_pipeline.py), as the
    # widget gets it.
    events, summary, start = simulate([2, 2, 2, 2], [3, 1, 3, 1], [0, 1, 0, 1])
    model = Pipeline("k", "v5e", events, summary, start)
    p = pipeline_payload("k", 0, (2, 2), model)
    assert (p["programs"], p["grid"], p["stall_time"]) == (4, [2, 2], 7.0)  # step 2 starts at 7
    assert p["summary"]["predicted_time"] == 12 and p["summary"]["stall_step"] == 2
    (t,) = p["tracks"]
    assert (t["source"], t["count"], t["bins"], t["busy"], t["window"]) == (
        "model", 10, 0, None, [0.0, 12.0])
    assert t["lanes"] == ["copy-in", "compute", "write-back"]
    assert t["lane_offsets"] == [0, 4, 8, 10]
    assert t["max_duration"] == [2.0, 3.0, 1.0]
    c = columns(t)
    rows = list(zip(c["lane"].tolist(), c["program"].tolist(), c["start"].tolist(),
                    c["end"].tolist(), strict=True))
    assert rows == [(0, 0, 0, 2), (0, 1, 2, 4), (0, 2, 5, 7), (0, 3, 7, 9),
                    (1, 0, 2, 5), (1, 1, 5, 6), (1, 2, 7, 10), (1, 3, 10, 11),
                    (2, 1, 6, 7), (2, 3, 11, 12)]
    assert c["kind"].tolist() == c["lane"].tolist()


def test_catalog_matmul_payload_is_the_model_sorted_by_lane():
    view = workbench("matmul_f32").pipeline()
    p = view.payload()
    assert (p["kernel"], p["chip"], p["grid"], p["programs"]) == ("matmul_kernel", "v5e",
                                                                  [4, 3, 2], 24)
    (t,) = p["tracks"]
    ev = view.model.events
    c = columns(t)
    order = np.lexsort((ev.start, ev.lane))
    np.testing.assert_array_equal(c["start"], ev.start[order])
    np.testing.assert_array_equal(c["program"], ev.program[order])
    assert t["lane_offsets"] == [0, 24, 48, 60]  # x, y fetched at every step (k innermost)
    for buf in ("lane", "kind", "start", "end", "program"):
        assert isinstance(t[buf], memoryview)


@pytest.fixture(scope="module")
def big():
    # 256 x 256 = 65,536 steps of an elementwise add: ~200k events, far over MAX_EVENTS.
    x = S((256 * 8, 256 * 128), jnp.float32)
    wb = pallaslab.inspect(lambda a, b: elementwise_2d(a, b, block=(8, 128)), x, x)
    return wb.pipeline()


def test_big_grid_is_sent_as_bins_and_a_window_of_events(big):
    p = big.payload()
    (t,) = p["tracks"]
    assert p["programs"] == 65536 and t["count"] > MAX_EVENTS
    assert t["bins"] == BINS
    busy = np.frombuffer(t["busy"], "<f4").reshape(3, BINS)
    assert busy.min() >= 0 and busy.max() <= 1
    # the bins hold the timeline: compute busy time over all bins = the model's compute time
    width = t["duration"] / BINS
    s = p["summary"]
    assert busy[1].sum() * width == pytest.approx(s["compute_time"], rel=1e-4)
    steps = np.frombuffer(t["bin_step"], "<i4")
    assert steps[0] == 0 and np.all(np.diff(steps) >= 0) and steps[-1] > 65000
    c = columns(t)
    # ... and the exact events of the first steps (the prologue): every event starting before
    # the window's end is there
    assert WINDOW_EVENTS - 3 <= len(c["start"]) <= WINDOW_EVENTS
    t1 = t["window"][1]
    assert t["window"][0] == 0 and 0 < t1 < t["duration"] / 10
    ev = big.model.events
    assert np.count_nonzero(ev.start < t1) == len(c["start"])
    assert set(c["program"].tolist()) == set(range(c["program"].max() + 1))
    nbytes = sum(len(bytes(t[k])) for k in ("lane", "kind", "start", "end", "program", "busy",
                                             "bin_step"))
    assert nbytes < 200_000


def test_big_grid_window_request_sends_that_windows_events(big):
    d = big.model.summary.predicted_time
    p = pipeline_payload("k", 0, (256, 256), big.model, window=(0.5, 0.501))
    (t,) = p["tracks"]
    c = columns(t)
    t0, t1 = t["window"]
    assert t0 == pytest.approx(0.5 * d) and t1 == pytest.approx(0.501 * d)
    assert len(c["start"]) > 0 and np.all(c["end"] >= t0) and np.all(c["start"] <= t1)
    ev = big.model.events
    inside = np.count_nonzero((ev.end >= t0) & (ev.start <= t1))
    assert len(c["start"]) == inside
    assert c["program"].min() > 30000  # mid-grid steps, not the prologue


def test_live_widget_asks_for_the_zoomed_window(big):
    pytest.importorskip("anywidget")
    w = big.widget
    assert w.payload["tracks"][0]["window"][0] == 0
    w.selection = {"window": [0.25, 0.2502], "step": 3}
    t0 = w.payload["tracks"][0]["window"][0]
    assert t0 == pytest.approx(0.25 * big.model.summary.predicted_time)


def test_text_and_html_summaries():
    view = workbench("vmem_overflow").pipeline(chip="tpu-v6e")
    assert view.chip == "v6e"
    text = view.to_text()
    assert text.startswith("Pipeline of kernel 0 body on TPU v6e (model)")
    assert "2 steps, predicted" in text and "longest stall step 1 (program (1,))" in text
    html = view.to_html()
    assert "<svg" in html and "copy-in" in html and "<script" not in html
    assert "longest stall <b>step 1 (program (1,))</b>" in html


def test_chip_from_the_workbench():
    assert workbench("matmul_f32", chips=["v6e", "v5e"]).pipeline().chip == "v6e"


def test_escaping_of_the_kernel_name():
    view = Workbench(copy_kernel_named(EVIL)).pipeline()
    html = view.to_html()
    assert "<img" not in html and "</script>" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert view.payload()["kernel"] == EVIL  # the widget inserts it as text


def test_profile_adds_the_measured_track():
    wb = workbench("matmul_f32")  # grid (4, 3, 2)
    view = wb.pipeline()
    assert view.profile() is view and wb.pipeline() is view  # the tab's view, updated
    p = view.payload()
    model, measured = p["tracks"]
    assert measured["source"] == "profile" and measured["name"] == "measured · cpu (interpret)"
    c = columns(measured)
    steps = c["program"][c["kind"] == measured["step_kind"]]
    assert sorted(steps.tolist()) == list(range(24))
    assert p["measured"]["steps"] == 24 and p["measured"]["total_time"] > 0
    assert model["source"] == "model" and measured["lanes"][1].endswith("(steps)")
    assert "measured cpu (interpret)" in view.to_text()
    assert view.to_html().count("<svg") == 2
    # or in one go: the option runs the profiler as the view is built
    again = wb.pipeline(profile=True)
    assert again is wb.pipeline() and len(again.payload()["tracks"]) == 2


def test_tab_is_registered():
    assert "pipeline" in [t.name for t in tabs()]
    assert "pipeline" in [t.name for t in workbench("matmul_f32").tabs()]
    # a Mosaic GPU kernel: the GPU time model's prediction (tests/views/test_view_pipeline_gpu.py)
    assert "pipeline" in [t.name for t in workbench("gpu_mesh_kernel").tabs()]
    assert isinstance(workbench("matmul_f32").pipeline(), PipelineView)


def test_profile_without_step_events_still_draws():
    # XLA may compile a short grid loop into one call: the trace then has the kernel only.
    from pallaslab.analysis.pipeline import Events
    from pallaslab.execute.profile import KINDS, ProfileTimeline

    one = ProfileTimeline("k", "cpu (interpret)", Events(
        lane=np.zeros(1, np.int16), start=np.zeros(1), end=np.full(1, 2e-3),
        kind=np.zeros(1, np.int16), program=np.full(1, -1, np.int64),
        lanes=("cpu (kernel)", "cpu (steps)", "cpu (ops)"), kinds=KINDS), None)
    view = workbench("elementwise_1d").pipeline()
    view.measured = one
    p = view.payload()
    t = p["tracks"][1]
    assert (t["count"], t["lane_offsets"], t["duration"]) == (1, [0, 1, 1, 1], 2e-3)
    assert p["measured"] == {"device": "cpu (interpret)", "total_time": 2e-3, "steps": 0,
                             "mean_step": None}
    assert "measured cpu (interpret): 2.00 ms, 0 steps" in view.to_text()
    assert view.to_html().count("<svg") == 2


def test_widget_sends_event_columns_as_binary_buffers():
    pytest.importorskip("anywidget")
    from ipywidgets.widgets.widget import _remove_buffers

    view = workbench("matmul_f32").pipeline()
    _state, paths, buffers = _remove_buffers(view.widget.get_state())
    for col in ("lane", "kind", "start", "end", "program"):
        assert ["payload", "tracks", 0, col] in paths
    start = buffers[paths.index(["payload", "tracks", 0, "start"])]
    assert len(bytes(start)) == 60 * 8
    assert view.widget.payload["kernel"] == "matmul_kernel"


def test_live_widget_switches_chips():
    pytest.importorskip("anywidget")
    view = workbench("vmem_overflow", chips=["v5e", "v6e"]).pipeline()
    w = view.widget
    assert (w.payload["chip"], w.payload["chips"], w.payload["live"]) == ("v5e", ["v5e", "v6e"],
                                                                        True)
    assert view.payload()["live"] is False  # the report's copy: no Python behind it
    v5e_time = w.payload["summary"]["predicted_time"]
    w.selection = {"chip": "v6e"}
    assert view.chip == "v6e" and w.payload["chip"] == "v6e"
    assert w.payload["summary"]["predicted_time"] < v5e_time  # v6e has more HBM bandwidth
    view.select("v5e")
    assert w.payload["chip"] == "v5e" and w.selection["chip"] == "v5e"
