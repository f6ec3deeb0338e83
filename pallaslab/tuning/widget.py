"""The Tune view live: a `TuneResult` as an anywidget (`pallaslab/views/static/tune.js`): a
heatmap of predicted time over two chosen parameters (configs out marked with their reason),
a sortable table of every candidate, the chosen config to copy and a roofline of the
candidates. Displayed as the live widget followed by its static copy (the one tree's HTML),
so a saved notebook shows the copy (`pallaslab.views.base.display_live_and_saved`). It reads a
`TuneResult` without importing `result`, which imports it."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from pallaslab.tuning.heatmap import axes
from pallaslab.tuning.view import best_dict, tune_tree
from pallaslab.views.base import display_live_and_saved, live_and_saved_bundles, widget_class
from pallaslab.views.parts import to_html, to_text

MODULE = "tune.js"
VERSION = 1


def tune_payload(result: Any) -> dict[str, Any]:
    """What the widget draws: JSON only (a tune's few hundred candidates need no buffers)."""
    varied = [p for p in result.params
              if len({repr(c.config.get(p)) for c in result.candidates}) > 1]
    picked = axes(result)
    best = result.best
    return {"version": VERSION, "params": list(result.params), "varied": varied,
            "axes": list(picked) if picked else None, "chips": list(result.chips),
            "targets": list(result.targets), "stopped": result.stopped,
            "values": {p: _ordered_texts(result, p) for p in result.params},
            "best": None if best is None else {"text": best_dict(best), "label": best.label,
                                               "rank": best.rank},
            "peaks": _peaks(result.chips),
            "candidates": [_candidate(result, c) for c in result.candidates]}


def _candidate(result: Any, c: Any) -> dict[str, Any]:
    chips = {}
    for e in c.chips:
        chips[e.chip] = {"us": _us(e.time), "bound": e.bound, "vmem_kib": e.vmem_bytes / 1024,
                         "fits": e.fits, "model": e.model,
                         "flops": getattr(e, "flops", None),
                         "hbm_bytes": getattr(e, "hbm_bytes", None)}
    return {"keys": {p: _text(c.config.get(p)) for p in result.params}, "label": c.label,
            "rank": c.rank, "out": c.out, "reason": _why(c), "us": _us(c.time()),
            "chips": chips, "verdicts": {v.target: v.text for v in c.verdicts}}


def _us(seconds: float | None) -> float | None:
    return None if seconds is None or not math.isfinite(seconds) else seconds * 1e6


def _why(c: Any) -> str | None:
    if c.reason is None:
        return None
    return f"{c.reason} ({c.decided_by} decided)" if c.over_estimate else c.reason


def _text(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _ordered_texts(result: Any, p: str) -> list[str]:
    seen: list[Any] = []
    for c in result.candidates:
        if c.config.get(p) not in seen:
            seen.append(c.config.get(p))
    with contextlib.suppress(TypeError):  # values of mixed types keep the space's order
        seen = sorted(seen)
    return [_text(v) for v in seen]


def _peaks(chips: Any) -> dict[str, dict[str, float]]:
    """Each chip's roofline: peak ops/s and HBM bytes/s."""
    from pallaslab.analysis.chips import chip as get_chip

    out = {}
    for name in chips:
        c = get_chip(name)
        out[name] = {"flops": c.bf16_flops, "hbm": c.hbm_bandwidth}
    return out


def tune_widget(result: Any) -> Any:
    """The live widget (needs `pallaslab[notebook]`). With plotly, its heatmap is plotly's
    FigureWidget between the view's head (the chosen config, the axis selects) and its body
    (the table, the roofline), redrawn from Python when a select changes; without plotly, the
    view's module draws the heatmap itself (SVG)."""
    payload = tune_payload(result)
    picked = payload["axes"]
    try:
        if picked is None:
            raise ImportError("no heatmap")
        from pallaslab.tuning.plotly_heatmap import TuneHeatmap

        heat = TuneHeatmap(result, result.chips[0], picked[0], picked[1])
    except ImportError:
        return widget_class(MODULE)(payload=payload)
    import ipywidgets

    head = widget_class(MODULE)(payload={**payload, "plotly": True, "part": "head"})
    body = widget_class(MODULE)(payload={**payload, "plotly": True, "part": "body"})

    def redraw(change: Any) -> None:
        sel = dict(change["new"] or {})
        if {"chip", "x", "y"} <= sel.keys() and sel["x"] != sel["y"]:
            heat.show(sel["chip"], sel["x"], sel["y"])

    head.observe(redraw, names="selection")
    box = ipywidgets.VBox([head, heat.figure, body])
    box.heatmap = heat  # for tests and the curious: the figure and the result it draws
    return box


def _text_form(result: Any) -> str:
    return to_text(tune_tree(result))


def _html_form(result: Any) -> str:
    return to_html(tune_tree(result, heatmap=True))


def tune_bundles(result: Any) -> list[dict[str, Any]]:
    """The outputs displaying a tune publishes: the live widget, then its static copy."""
    return live_and_saved_bundles(lambda: tune_widget(result), lambda: _text_form(result),
                                  lambda: _html_form(result))


def display_tune(result: Any) -> None:
    display_live_and_saved(lambda: tune_widget(result), lambda: _text_form(result),
                           lambda: _html_form(result))
