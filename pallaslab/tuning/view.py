"""The tune as one tree of parts (`pallaslab.views.parts`): the text form, the HTML (with the
heatmap) and the CLI (`pallaslab.cli._parts.to_rich`) render the same structure. (It reads a
`TuneResult` and its `Candidate`s without importing `result`, which imports it.)"""

from __future__ import annotations

from typing import Any

from pallaslab.views.parts import Badge, Code, Line, Note, Part, Section, Table, Text


def tune_tree(result: Any, *, heatmap: bool = False) -> Section:
    children: list[Part] = [_summary(result)]
    if result.best is not None:
        children.append(Line(("chosen: ", Code(best_dict(result.best)))))
    if result.ranked:
        children.append(ranked_table(result))
    outs = [c for c in result.candidates if c.out]
    if outs:
        children.append(Section((Text("Out"),), (out_table(outs),)))
    if result.stopped:
        children.append(Note(f"stopped: {result.stopped}", "warning", kind="time limit"))
    if heatmap:
        from pallaslab.tuning.heatmap import heatmap_part

        children.append(heatmap_part(result))
    return Section((Text("Tune"),), tuple(children), css="pl-tune")


def best_dict(c: Any) -> str:
    """The config as a dict to copy into code: `{'bm': 256, 'bk': 512}`."""
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in c.config.items()) + "}"


def _summary(result: Any) -> Line:
    n, ranked = len(result.candidates), len(result.ranked)
    compiled = sum(1 for c in result.candidates if c.verdicts)
    parts: list[Any] = [f"{n} candidate(s): {ranked} ranked, {n - ranked} out; modelled on "
                        f"{', '.join(result.chips)}"]
    if result.targets:
        parts.append(f"; the {compiled} fastest compiled for {', '.join(result.targets)}")
    else:
        parts.append("; not compiled (model only)")
    return Line(tuple(parts))


def ranked_table(result: Any) -> Table:
    columns = ["rank", *result.params]
    for chip in result.chips:
        columns += [f"{chip} us", f"{chip} bound", f"{chip} VMEM KiB"]
    columns += [f"{t} compiler" for t in result.targets]
    numeric = tuple(i for i, c in enumerate(columns)
                    if c == "rank" or c.endswith((" us", " KiB")))
    rows = tuple(_ranked_row(result, c) for c in result.ranked)
    return Table(tuple(columns), rows, caption="fastest predicted first (slowest chip)",
                 numeric=numeric)


def _ranked_row(result: Any, c: Any) -> tuple[Any, ...]:
    cells: list[Any] = [str(c.rank), *(_value(c.config.get(p)) for p in result.params)]
    for chip in result.chips:
        e = c.chip(chip)
        cells += [f"{e.time * 1e6:.2f}" if e.time is not None else "?", e.bound or "?",
                  f"{e.vmem_bytes / 1024:.0f}"]
    by_target = {v.target: v for v in c.verdicts}
    over = f" (over by the estimate; {c.decided_by} decided)" if c.over_estimate else ""
    for t in result.targets:
        v = by_target.get(t)
        cells.append(Badge("-") if v is None else
                     Badge(v.text + over, "ok" if v.compiles else "bad"))
    return tuple(cells)


def out_table(outs: list[Any]) -> Table:
    return Table(("config", "why it is out"),
                 tuple((Code(c.label), _why(c)) for c in outs))


def _why(c: Any) -> str:
    why = c.reason or ""
    return f"{why} ({c.decided_by} decided)" if c.over_estimate else why


def _value(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)
