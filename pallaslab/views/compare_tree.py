"""The Compare view's one structure: a comparison as a tree of parts (`pallaslab.views.parts`).

The view's text and static HTML and `pallaslab compare`'s terminal output all render this tree,
so a verdict, a cause ("why output `o` is wrong", one note per cause named by its kind), a
run's status and a pair's figures (`pair_cells`) are worded here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pallaslab.analysis.tiling import tile
from pallaslab.execute.comparing.pair import is_float
from pallaslab.views.compare_payload import labelled_findings, pair_cells, writer_lines
from pallaslab.views.parts import Badge, Code, Inline, Line, Note, Part, Section, Table, Text

if TYPE_CHECKING:
    from pallaslab.analysis.tiling import Tiling
    from pallaslab.execute import Comparison, OutputComparison, PairComparison

BLOCKS_SAID = 16  # mismatched blocks listed per pair
PROGRAMS_SAID = 8  # writer programs listed per block


def compare_tree(c: Comparison, title: str, tiling: Tiling | None = None,
                 kernel: int | None = None) -> Section:
    """`c` as one tree: the diagnosis first (a saved copy is read top down: the verdict, then
    why), then the runs, what they found, and per output its pairs and mismatched blocks.
    `tiling` is kernel `kernel`'s; other kernels are tiled here (a tiling names the programs
    that wrote a block and what they read), so the terminal says what the view says."""
    tilings: dict[int | None, Tiling | None] = {kernel: tiling} if tiling is not None else {}
    kernels = {k.index: k for k in c.kernels}

    def tiling_of(out: OutputComparison) -> Tiling | None:
        if out.kernel not in tilings:
            tilings[out.kernel] = tile(kernels[out.kernel]) if out.kernel in kernels else None
        return tilings[out.kernel]

    children: list[Part] = [s for out in c.outputs
                            if (s := cause_section(out, writer_lines(c, out, tiling_of(out))))]
    children += [Note(n) for n in c.notes]
    children.append(runs_table(c))
    if findings := findings_section(c):
        children.append(findings)
    children += [Note(w, "warning", css="pl-cmp-warning") for w in c.warnings]
    if incomplete := incomplete_note(c):
        children.append(incomplete)
    children += [output_section(c, out, tiling_of(out)) for out in c.outputs if out.pairs]
    return Section((title,), tuple(children), css="pl-compare-tree")


def cause_section(out: OutputComparison, writers: list[str]) -> Section | None:
    """Why an output is wrong, as the widget lists it, and who wrote its wrong elements."""
    causes = getattr(out, "causes", ())
    untraced = out.untraced_line() if hasattr(out, "untraced_line") else None
    if not causes and untraced is None:
        return None
    parts: list[Part] = [Note(x.message, "error", x.kind, css="pl-cmp-cause") for x in causes]
    parts += [Note(untraced, "warning", "untraced")] if untraced else []
    parts += [Line((w,), css="pl-cmp-writer") for w in writers]
    # "output" before the name: it reads right whatever the output is called ("outputs")
    return Section(("Why output ", Code(out.origin), " is wrong"), tuple(parts),
                   css="pl-cmp-causes")


def runs_table(c: Comparison) -> Table:
    rows = tuple((r.executor, r.status,
                  f"{r.wall_time:.3g}" if r.status == "ran" else "-",
                  "; ".join([r.reason or "", *r.notes]).strip("; ") or "-")
                 for r in c.results)
    return Table(("executor", "status", "time (s)", "reason / notes"), rows, numeric=(2,),
                 css="pl-cmp-runs")


def findings_section(c: Comparison) -> Section | None:
    found = labelled_findings(c)
    if not found:
        return None
    return Section(("Findings of the runs",), tuple(
        Line((Text(f"{who}: ", "dim"), Badge(f.severity, "bad" if f.severity == "error" else ""),
              " ", Code(f.code), f" ({f.operand})" if f.operand else "", f": {f.message}"),
             css=f"pl-finding pl-{f.severity}")
        for who, f in found), css="pl-cmp-findings")


def incomplete_note(c: Comparison) -> Note | None:
    """What was not compared (None: the comparison is complete)."""
    if len(c.ran) < 2:
        return Note("nothing compared: fewer than two executors ran.", "warning", "incomplete")
    if not c.complete:
        names = ", ".join(r.executor for r in c.missing)
        return Note(f"{names} did not run; only {', '.join(c.ran)} were compared.", "warning",
                    "incomplete")
    return None


def output_section(c: Comparison, out: OutputComparison, tiling: Tiling | None) -> Section:
    """An output's pairs (one row each) and the programs that wrote its mismatched blocks."""
    nans = any(p.nan_a or p.nan_b for p in out.pairs)
    rows: list[tuple[Inline, ...]] = []
    for p in out.pairs:
        abs_err, rel_err, ulp, nan = pair_cells(p, is_float(out.dtype))
        close = Text(p.error, "bad") if p.error else (
            Text("yes", "ok") if p.allclose else Text("no", "bad"))
        rows.append((p.a, p.b, abs_err, rel_err, ulp, *([nan] if nans else []),
                     f"{p.mismatched_elements:,}", close))
    columns = ("a", "b", "max abs err", "max rel err", "ULP", *(["NaN a / b"] if nans else []),
               "mismatched", "allclose")
    tol = "; ".join(f"{p.a} vs {p.b}: rtol {p.rtol:.3g}, atol {p.atol:.3g}" for p in out.pairs)
    parts: list[Part] = [Table(columns, tuple(rows), caption=tol, numeric=(2, 3, 4, 6 + nans))]
    blocks = tuple((f"{p.a} vs {p.b}", b, progs) for p in out.pairs
                   for b, progs in block_rows(c, out, p, tiling)[:BLOCKS_SAID])
    if blocks:
        parts.append(Table(("pair", "block", "written by programs"), blocks,
                           caption="Mismatched blocks and the programs that wrote them"))
    shape = f"{out.dtype}{list(out.shape)}" + (
        f" blocks {list(out.block_shape)}" if out.block_shape else "")
    return Section((Code(out.origin), f" {shape}"), tuple(parts), css="pl-cmp-output")


def block_rows(c: Comparison, out: OutputComparison, p: PairComparison, tiling: Tiling | None
               ) -> list[tuple[str, str]]:
    """(block, its writer programs) of a pair, as text."""
    infos = c.results[0].output_info if c.results else ()
    info = next((i for o, i in zip(c.outputs, infos, strict=False) if o is out), None)
    ot = tiling.operands.get(info.origin or "") if tiling and info else None
    rows = []
    for b in p.mismatched_blocks:
        if ot is not None and tiling is not None:
            steps = ot.steps_with_block(b)
            progs = ", ".join(str(q) for q in tiling.programs_at(steps, limit=PROGRAMS_SAID))
            progs += " …" if len(steps) > PROGRAMS_SAID else ""
        else:
            progs = ", ".join(str(q) for q in p.programs[:PROGRAMS_SAID])
        rows.append((str(tuple(b)), progs or "none (never written)"))
    return rows
