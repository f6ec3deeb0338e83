"""A heatmap of predicted time over two parameters per chip (matplotlib, imported when drawn;
an SVG for the HTML form). Candidates that are out are marked with a cross; where several
configs share a cell (other parameters), the cell shows the fastest."""

from __future__ import annotations

import io
import math
from typing import Any

from pallaslab.views._html import esc
from pallaslab.views.parts import Markup

TuneResult = Any  # `pallaslab.tuning.result.TuneResult` (not imported: it imports the view)


def axes(result: TuneResult) -> tuple[str, str] | None:
    """The first two parameters with more than one value."""
    varied = [p for p in result.params
              if len({repr(c.config.get(p)) for c in result.candidates}) > 1]
    return (varied[0], varied[1]) if len(varied) >= 2 else None


def grid(result: TuneResult, chip: str, x: str, y: str
         ) -> tuple[list[Any], list[Any], list[list[float]], list[list[bool]]]:
    """x values, y values, the fastest predicted seconds per cell (nan: none in), and which
    cells hold only candidates that are out."""
    xs = _ordered(c.config.get(x) for c in result.candidates)
    ys = _ordered(c.config.get(y) for c in result.candidates)
    times = [[math.nan] * len(xs) for _ in ys]
    out = [[True] * len(xs) for _ in ys]
    for c in result.candidates:
        i, j = ys.index(c.config.get(y)), xs.index(c.config.get(x))
        if c.out:
            continue
        out[i][j] = False
        t = c.time(chip)
        if math.isfinite(t) and not t >= times[i][j]:
            times[i][j] = t
    return xs, ys, times, out


def _ordered(values: Any) -> list[Any]:
    seen: list[Any] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    try:
        return sorted(seen)
    except TypeError:
        return seen


def heatmap_svg(result: TuneResult) -> str | None:
    """One panel per chip, as SVG text; None when fewer than two parameters vary."""
    import matplotlib

    matplotlib.use("Agg")  # a static image: no window, no notebook backend
    from matplotlib.figure import Figure

    picked = axes(result)
    if picked is None:
        return None
    x, y = picked
    fig = Figure(figsize=(3.6 * len(result.chips), 3.2))
    for n, chip in enumerate(result.chips):
        ax = fig.add_subplot(1, len(result.chips), n + 1)
        xs, ys, times, out = grid(result, chip, x, y)
        shown = [[t * 1e6 for t in row] for row in times]
        image = ax.imshow(shown, origin="lower", cmap="viridis_r", aspect="auto")
        fig.colorbar(image, ax=ax, label="predicted us")
        for i, row in enumerate(out):
            for j, refused in enumerate(row):
                if refused:
                    ax.text(j, i, "x", ha="center", va="center", color="red")
        ax.set_xticks(range(len(xs)), [str(v) for v in xs])
        ax.set_yticks(range(len(ys)), [str(v) for v in ys])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(chip)
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


def heatmap_part(result: TuneResult) -> Markup:
    try:
        svg = heatmap_svg(result)
    except ImportError:
        return heatmap_note("heatmap skipped: matplotlib is not installed "
                            "(pip install matplotlib)")
    if svg is None:
        return heatmap_note("heatmap skipped: it needs two parameters with several values")
    picked = axes(result)
    assert picked is not None
    legend = " (x: every candidate there is out)" if any_crossed(result, *picked) else ""
    return Markup(f'<figure class="pl-tune-heatmap">{svg}</figure>',
                  f"heatmap of predicted time over {picked[0]} and {picked[1]}{legend}")


def any_crossed(result: TuneResult, x: str, y: str) -> bool:
    """Does some cell hold candidates that are all out (a cross, which the legend explains)?"""
    cells: dict[tuple[Any, Any], list[bool]] = {}
    for c in result.candidates:
        cells.setdefault((c.config.get(x), c.config.get(y)), []).append(c.out)
    return any(all(outs) for outs in cells.values())


def heatmap_note(text: str) -> Markup:
    return Markup(f'<p class="pl-note">{esc(text)}</p>', text)
