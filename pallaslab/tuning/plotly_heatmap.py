"""The live Tune view's heatmap as a plotly `FigureWidget` (plotly >= 6: an anywidget carrying
its own bundled JavaScript, so it draws offline): predicted time over two parameters on one
chip, the fastest config per cell, a cell whose configs are all out marked with a cross and
their reasons on hover. The view's axis and chip selects redraw it (`TuneHeatmap.show`).
plotly is imported when drawn."""

from __future__ import annotations

import math
from typing import Any

from pallaslab.tuning.heatmap import grid

TuneResult = Any  # `pallaslab.tuning.result.TuneResult` (not imported: it imports the view)


def cells(result: TuneResult, chip: str, x: str, y: str
          ) -> tuple[list[str], list[str], list[list[float | None]], list[list[str]],
                     list[list[str]]]:
    """x labels, y labels, predicted us per cell (None: nothing in), a mark per cell ("x":
    every config there is out) and each cell's hover text."""
    xs, ys, times, out = grid(result, chip, x, y)
    hover: list[list[list[str]]] = [[[] for _ in xs] for _ in ys]
    for c in result.candidates:
        i, j = ys.index(c.config.get(y)), xs.index(c.config.get(x))
        t = c.time(chip)
        hover[i][j].append(f"{c.label}: out, {c.reason}" if c.out else
                           f"{c.label}: {t * 1e6:.2f} us" if math.isfinite(t) else
                           f"{c.label}: not modelled")
    z = [[None if math.isnan(t) else t * 1e6 for t in row] for row in times]
    marks = [["\u00d7" if o and hover[i][j] else "" for j, o in enumerate(row)]
             for i, row in enumerate(out)]
    return ([str(v) for v in xs], [str(v) for v in ys], z, marks,
            [["<br>".join(h) for h in row] for row in hover])


class TuneHeatmap:
    """One FigureWidget, redrawn for the chip and axes picked."""

    def __init__(self, result: TuneResult, chip: str, x: str, y: str):
        import plotly.graph_objects as go

        self.result = result
        self.figure = go.FigureWidget(
            go.Heatmap(colorscale="RdYlGn_r", colorbar={"title": {"text": "us"}},
                       hovertemplate="%{hovertext}<extra></extra>", texttemplate="%{text}",
                       hoverongaps=False),
            layout={"height": 320, "width": 520, "margin": {"l": 60, "r": 20, "t": 36, "b": 50}})
        self.show(chip, x, y)

    def show(self, chip: str, x: str, y: str) -> None:
        xs, ys, z, marks, hover = cells(self.result, chip, x, y)
        with self.figure.batch_update():
            trace = self.figure.data[0]
            trace.x, trace.y, trace.z, trace.text, trace.hovertext = xs, ys, z, marks, hover
            self.figure.layout.xaxis.title.text = x
            self.figure.layout.yaxis.title.text = y
            self.figure.layout.xaxis.type = self.figure.layout.yaxis.type = "category"
            crossed = any(m for row in marks for m in row)
            self.figure.layout.title.text = (f"predicted us on {chip}, the fastest config per "
                                             "cell" + ("; \u00d7: all out" if crossed else ""))
