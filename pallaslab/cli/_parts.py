"""A view's tree of parts (`pallaslab.views.parts`) as a rich renderable: the terminal shows
the structure the text and HTML forms show, with colour for tones and severities."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pallaslab.util.text import visible
from pallaslab.views.parts import (
    Badge,
    Code,
    Figure,
    Inline,
    Line,
    Markup,
    Note,
    Part,
    Section,
    Table,
    Text,
)

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text as RichText

TONE_STYLE = {"dim": "dim", "ok": "green", "bad": "bold red", "warning": "yellow"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "note": "dim", "info": "dim"}


def to_rich(part: Part) -> RenderableType:
    """`part` for `Console.print`; user text stays text (rich `Text`, never markup)."""
    from rich.console import Group
    from rich.padding import Padding

    if isinstance(part, Section):
        children = [to_rich(c) for c in part.children]
        if not part.title:
            return Group(*children)
        title = _inline(part.title)
        title.stylize("bold")
        return Group(title, Padding(Group(*children), (0, 0, 0, 2)))
    if isinstance(part, Table):
        return _table(part)
    if isinstance(part, Note):
        from rich.text import Text as RichText

        return RichText(f"{visible(part.label)}: ", SEVERITY_STYLE.get(part.severity, "")) \
            + _inline((part.text,))
    if isinstance(part, Figure):
        return _inline((f"{part.label} ", Text(part.value + part.unit, part.tone)))
    if isinstance(part, Markup):
        return _inline((part.text,))
    return _inline(part.parts if isinstance(part, Line) else (part,))


def _inline(parts: tuple[Inline, ...]) -> RichText:
    from rich.text import Text as RichText

    out = RichText()
    for p in parts:
        if isinstance(p, str):
            out.append(visible(p))
        elif isinstance(p, Code):
            out.append(visible(p.text), "cyan")
        else:
            style = TONE_STYLE.get(p.tone, "")
            out.append(visible(p.text), f"reverse {style}".strip() if isinstance(p, Badge)
                       else style)
    return out


def _table(t: Table) -> RenderableType:
    from rich.table import Table as RichTable

    table = RichTable(title=visible(t.caption) or None, show_edge=False, header_style="bold")
    for i, col in enumerate(t.columns):
        table.add_column(col, justify="right" if i in t.numeric else "left")
    for row in t.rows:
        table.add_row(*(_inline((c,)) for c in row))
    return table
