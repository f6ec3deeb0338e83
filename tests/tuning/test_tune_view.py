"""The Tune view live: the widget's payload (every candidate with its time, bound, VMEM,
verdict and reason; the heatmap's axes and values; the chosen config as a dict; each chip's
roofline and each candidate's work), and the live widget followed by its static copy."""

from __future__ import annotations

import json

import pytest
from tuning.matmul_case import arguments, matmul

import pallaslab
from pallaslab.tuning.widget import tune_bundles, tune_payload
from pallaslab.views.base import SAVED_CLASS, WIDGET_VIEW, module_source


@pytest.fixture(scope="module")
def result():
    space = {"bm": [256, 384, 512], "bn": [256, 512], "bk": [512, 1024]}
    return pallaslab.tune(matmul, space, *arguments(), chip=["v5e", "v6e"], compile_top=0)


def test_the_payload_holds_every_candidate_with_what_the_table_shows(result):
    p = tune_payload(result)
    json.dumps(p)  # JSON only
    assert len(p["candidates"]) == len(result.candidates) == 12
    assert p["axes"] == ["bm", "bn"] and p["varied"] == ["bm", "bn", "bk"]
    assert p["values"]["bm"] == ["256", "384", "512"]
    best = result.best
    first = next(c for c in p["candidates"] if c["rank"] == 1)
    assert first["label"] == best.label and first["out"] is False and first["reason"] is None
    assert first["chips"]["v5e"]["us"] == pytest.approx(best.time("v5e") * 1e6)
    assert first["chips"]["v5e"]["bound"] == best.chip("v5e").bound
    assert first["chips"]["v6e"]["vmem_kib"] == best.chip("v6e").vmem_bytes / 1024
    outs = [c for c in p["candidates"] if c["out"]]
    assert outs and all(c["keys"]["bm"] == "384" and c["reason"] for c in outs)
    assert all(c["rank"] is None and c["us"] is None for c in outs)


def test_the_chosen_config_is_a_dict_to_copy(result):
    p = tune_payload(result)
    assert p["best"]["text"] == repr(result.best.config)
    assert eval(p["best"]["text"]) == result.best.config


def test_each_candidate_carries_its_work_for_the_roofline(result):
    p = tune_payload(result)
    first = next(c for c in p["candidates"] if c["rank"] == 1)["chips"]["v5e"]
    assert first["flops"] == pytest.approx(2 * 1024 ** 3, rel=0.01)  # the whole matmul's
    assert first["hbm_bytes"] >= 3 * 1024 * 1024 * 4  # x, y read at least once, o written
    assert p["peaks"]["v5e"]["flops"] > 1e14 and p["peaks"]["v5e"]["hbm"] > 1e11


def test_displayed_it_is_the_live_widget_then_its_static_copy(result):
    pytest.importorskip("anywidget")
    live, saved = tune_bundles(result)
    assert WIDGET_VIEW in live
    assert "candidate(s)" in live["text/plain"]
    assert SAVED_CLASS in saved["text/html"] and "pl-tune-heatmap" in saved["text/html"]
    assert "export default" in module_source("tune.js")
    assert callable(result._ipython_display_)


def test_with_plotly_the_heatmap_is_plotlys_figure_widget_between_head_and_body(result):
    pytest.importorskip("plotly")
    box = result.widget()
    head, figure, body = box.children
    assert figure is box.heatmap.figure and type(figure).__name__ == "FigureWidget"
    assert (head.payload["part"], body.payload["part"]) == ("head", "body")
    trace = figure.data[0]
    assert list(trace.x) == ["256", "384", "512"] and list(trace.y) == ["256", "512"]
    assert len(trace.z) * len(trace.z[0]) == 6  # bm x bn, the fastest bk in each cell
    column = list(trace.x).index("384")  # every config there is out: crossed, reason on hover
    assert all(row[column] is None for row in trace.z)
    assert all(trace.text[i][column] == "\u00d7" for i in range(2))
    assert "out, capture failed: ValueError: bm=384 does not divide" in trace.hovertext[0][column]
    best = result.best
    i, j = list(trace.y).index(str(best.config["bn"])), list(trace.x).index(str(best.config["bm"]))
    assert trace.z[i][j] == pytest.approx(best.time("v5e") * 1e6)
    head.selection = {"chip": "v6e", "x": "bm", "y": "bk"}  # the head's selects redraw it
    assert figure.layout.yaxis.title.text == "bk" and list(figure.data[0].y) == ["512", "1024"]
    assert figure.layout.title.text.endswith("on v6e, the fastest config per cell; \u00d7: all out")
    head.selection = {"chip": "v6e", "x": "bk", "y": "bn"}  # no cell all out: no cross to explain
    assert figure.layout.title.text == "predicted us on v6e, the fastest config per cell"


def test_its_ipython_display_publishes_both(result, monkeypatch):
    pytest.importorskip("anywidget")
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda b, raw: shown.append(b))
    result._ipython_display_()
    assert len(shown) == 2 and WIDGET_VIEW in shown[0] and SAVED_CLASS in shown[1]["text/html"]
