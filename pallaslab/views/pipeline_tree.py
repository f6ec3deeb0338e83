"""The Pipeline view's one structure: a kernel's pipeline as a tree of parts (`views.parts`).

The view's text and static HTML render this tree, so the lead line (steps, predicted time), the
headline facts (`PipelineView.headline`: what a manual-DMA kernel's DMAs moved in place of the
BlockSpec traffic), each nested pipeline, the manual DMAs (`pipeline_manual.op_text`) and the
recorded run (`pipeline_record.op_line`) are worded once. The timelines are SVG `Markup` drawn by
`pipeline.static_timeline`: the text has the facts instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from pallaslab.views.parts import Figure, Inline, Line, Markup, Part, Section, Text
from pallaslab.views.pipeline_record import RunRecord, record_section


def pipeline_tree(title: tuple[Inline, ...], lead: str | None, facts: Sequence[tuple[str, str]],
                  timelines: Sequence[str], manual: Sequence[Part], recorded: RunRecord | None,
                  recorded_note: str | None) -> Section:
    """The lead line and the facts, the timelines, what the body does beyond its BlockSpecs
    (`manual`), then the recorded run or why there is none."""
    children: list[Part] = [Line((lead,), css="pl-lead")] if lead else []
    if facts:
        children.append(Section((), tuple(Figure(a, b) for a, b in facts), css="pl-facts"))
    children += [Markup(svg) for svg in timelines]
    children += manual
    if recorded_note:
        children.append(Line((Text(recorded_note, "dim"),), css="pl-dim"))
    if recorded is not None:
        children.append(record_section(recorded))
    return Section(title, tuple(children), css="pl-pipeline-tree")
