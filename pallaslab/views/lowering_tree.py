"""The Lowering view's one structure: a kernel's lowerings as a tree of parts (`views.parts`).

Per target: a heading with the verdict (ok or FAILED, compiled or not), the diagnostics, the
resources (VMEM, SMEM, registers, spills, each with where its figure comes from:
`lowering_payload.resource_figures`) and the stages, each an IR excerpt (`Markup`: a
collapsible `<pre>` in HTML, its name and size in text). The view's text and static HTML and
`pallaslab lower`'s terminal output render this tree, so a lowering is worded in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pallaslab.model import Kernel
from pallaslab.views._html import esc
from pallaslab.views.lowering_payload import cap_text, line_count, resource_rows
from pallaslab.views.parts import Badge, Code, Inline, Line, Markup, Part, Section, Table, Text

if TYPE_CHECKING:
    from pallaslab.lowering import KernelLowering
    from pallaslab.lowering.result import Stage

HTML_STAGE_CAP = 40_000  # characters of one stage in the static HTML `<pre>`
HTML_BUDGET = 240_000  # ... of all stages (notebooks store this HTML in every saved output)
RESOURCE_COLUMNS = ("resource", "value", "source")


def lowering_tree(index: int, name: str, results: Mapping[str, KernelLowering], *,
                  kernel: Kernel | None = None, error: tuple[str, str] | None = None,
                  html_budget: int = HTML_BUDGET) -> Section:
    """Kernel `index` (`name`) lowered per target; `error`: (target, why) the last lowering
    asked for did not happen; `kernel` gives a compile that said nothing about VMEM the
    occupancy model's estimate."""
    budget = [html_budget]
    children: list[Part] = [target_section(index, name, t, r, kernel, budget)
                            for t, r in results.items()]
    if error is not None:
        target, why = error
        children.append(Line((*_kernel_for(index, name, target), ": ", Text(why, "bad")),
                             css="pl-finding pl-error"))
    return Section((), tuple(children), css="pl-lowering-tree")


def _kernel_for(index: int, name: str, target: str) -> tuple[Inline, ...]:
    return (f"Lowering of kernel {index} ", Code(name), f" for {target}")


def verdict(r: KernelLowering) -> tuple[Inline, ...]:
    """"ok, not compiled", "FAILED, compiled", and whether it came from the disk cache."""
    return (Text("ok" if r.ok else "FAILED", "ok" if r.ok else "bad"),
            ", compiled" if r.compiled else ", not compiled",
            *((Text(" (cached)", "dim"),) if r.cached else ()))


def target_section(index: int, name: str, target: str, r: KernelLowering,
                   kernel: Kernel | None = None, budget: list[int] | None = None) -> Section:
    title = (*_kernel_for(index, name, target), f" ({r.backend}): ", *verdict(r))
    children: list[Part] = [*diagnostic_lines(r), resources_part(r, kernel, target)]
    left = [HTML_BUDGET] if budget is None else budget
    children.append(Section(("stages",), tuple(stage_part(s, left) for s in r.stages)
                            or (Line((Text("none", "dim"),)),), css="pl-stages"))
    return Section(title, tuple(children), css="pl-lowering-static", data=(("target", target),))


def diagnostic_lines(r: KernelLowering) -> list[Part]:
    """"error tpu-block-shape [args[0]]: ..." per diagnostic, or that there are none."""
    if not r.diagnostics:
        return [Line((Text("no diagnostics", "ok"),), css="pl-ok")]
    return [Line((Badge(d.severity, "bad" if d.severity == "error" else ""), " ", Code(d.code),
                  *((Text(f" [{d.operand}]", "dim"),) if d.operand else ()), f": {d.message}"),
                 css=f"pl-finding pl-{d.severity}") for d in r.diagnostics]


def resources_part(r: KernelLowering, kernel: Kernel | None, target: str) -> Part:
    """A row per resource with where its figure comes from; one line when none is known."""
    rows, line = resource_rows(kernel, target, r)
    if line is not None:
        return Line((Text(line, "dim"),), css="pl-resources-static")
    return Table(RESOURCE_COLUMNS, tuple((label, value, Text(source, "dim"))
                                         for _, label, value, source in rows),
                 numeric=(1,), css="pl-resources-static")


def stage_part(s: Stage, budget: list[int]) -> Markup:
    """A stage: text its name and size; HTML a collapsible excerpt of its IR. `budget[0]`
    (characters left for every stage's excerpt) shrinks as it goes."""
    shown = cap_text(s.text, max(0, min(HTML_STAGE_CAP, budget[0])))
    budget[0] -= len(shown)
    lines = line_count(s.text)
    more = lines - line_count(shown)
    note = (f'<p class="pl-dim">… {more:,} more lines (the full text is in '
            "<code>lowering.lower(...)</code>)</p>" if more else "")
    pre = f'<pre class="pl-ir">{esc(shown)}</pre>' if shown else ""
    html = (f'<details class="pl-stage" data-stage="{esc(s.name)}"><summary><code>'
            f'{esc(s.name)}</code> <span class="pl-dim">{lines:,} lines</span></summary>'
            f"{pre}{note}</details>")
    return Markup(html, f"{s.name} ({lines:,} lines)")
