"""One structure per view: a small tree of parts that renders to text, to static HTML and (in
`pallaslab.cli._parts`) to the terminal.

A view builds its tree once (`Section`s holding `Table`s, `Figure`s, `Note`s and lines of
inline `Text`, `Code` and `Badge`); `to_text` and `to_html` here render any tree, so the
wording of a verdict, a cause or a figure lives where the tree is built and nowhere else. Every
string is user-derived as far as the renderers know: HTML escapes it (`_html.esc`), text makes
control and bidi characters visible (`util.text.visible`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from pallaslab.util.text import visible
from pallaslab.views._html import esc

# Tones: "" (plain), "dim", "ok", "bad", "warning" (CSS classes pl-dim, pl-ok, pl-cmp-bad ...)
TONE_CLASS = {"dim": "pl-dim", "ok": "pl-ok", "bad": "pl-cmp-bad", "warning": "pl-warning"}


@dataclass(frozen=True)
class Text:
    """Words, with a tone ("dim" for who said it, "ok"/"bad" for a verdict)."""

    text: str
    tone: str = ""


@dataclass(frozen=True)
class Code:
    """A name from the user's code (an operand, a kernel, a finding's code)."""

    text: str


@dataclass(frozen=True)
class Badge:
    text: str
    tone: str = ""


Inline = str | Text | Code | Badge


@dataclass(frozen=True)
class Line:
    """A paragraph of inline parts."""

    parts: tuple[Inline, ...]
    css: str = ""


@dataclass(frozen=True)
class Figure:
    """One measured value: "max abs err 0.5"."""

    label: str
    value: str
    unit: str = ""
    tone: str = ""


@dataclass(frozen=True)
class Note:
    """A finding, warning or cause: text "kind: text", HTML a badge then the text. `kind`
    names it (a cause's kind, "incomplete"); the severity stands in when it has none."""

    text: str
    severity: str = "note"  # "note", "info", "warning", "error"
    kind: str = ""
    css: str = ""

    @property
    def label(self) -> str:
        return self.kind or self.severity


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]
    caption: str = ""
    numeric: tuple[int, ...] = ()  # right-aligned columns
    css: str = ""


@dataclass(frozen=True)
class Markup:
    """Trusted HTML built by the view itself (an SVG map); text and terminal show `text`."""

    html: str
    text: str = ""


@dataclass(frozen=True)
class Section:
    title: tuple[Inline, ...]
    children: tuple[Part, ...] = ()
    css: str = ""
    data: tuple[tuple[str, str], ...] = ()  # data-* attributes of its HTML element


Part = Section | Table | Figure | Note | Line | Markup | Text | Code | Badge | str


def plain(part: Inline | Sequence[Inline]) -> str:
    """Inline parts as plain text (unescaped: for a renderer or a test)."""
    if isinstance(part, (str, Text, Code, Badge)):
        return part if isinstance(part, str) else part.text
    return "".join(plain(p) for p in part)


# --- text -------------------------------------------------------------------------------------


def to_text(part: Part, width: int | None = None) -> str:
    """`part` as text, children indented two spaces under their section's title (a nested
    section's title ends with ":"); `width` wraps long lines (None: never)."""
    return visible("\n".join(_text_lines(part, width, 0)))


def _wrap(line: str, width: int | None, indent: int) -> list[str]:
    pad = " " * indent
    if width is None or len(pad + line) <= width:
        return [pad + line]
    return textwrap.wrap(line, width, initial_indent=pad, subsequent_indent=pad + "  ")


def _text_lines(part: Part, width: int | None, indent: int) -> list[str]:
    if isinstance(part, Section):
        title = plain(part.title)
        head = title + (":" if indent and part.children and not title.endswith(":") else "")
        lines = _wrap(head, width, indent) if title else []
        step = 2 if title else 0
        for child in part.children:
            lines += _text_lines(child, width, indent + step)
        return lines
    if isinstance(part, Table):
        return _table_lines(part, indent)
    if isinstance(part, Markup):
        return _wrap(part.text, width, indent) if part.text else []
    if isinstance(part, Figure):
        return _wrap(f"{part.label} {part.value}{part.unit}", width, indent)
    if isinstance(part, Note):
        return _wrap(f"{part.label}: {part.text}", width, indent)
    return _wrap(plain(part.parts if isinstance(part, Line) else part), width, indent)


def _table_lines(t: Table, indent: int) -> list[str]:
    cells = [list(t.columns), *([plain(c) for c in row] for row in t.rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(t.columns))]
    pad = " " * indent

    def row(r: list[str]) -> str:
        return pad + "  ".join(c.rjust(w) if i in t.numeric else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()

    return [pad + t.caption] * bool(t.caption) + [row(r) for r in cells]


# --- HTML -------------------------------------------------------------------------------------


def to_html(part: Part) -> str:
    """`part` as static HTML: sections as <div> with an <h4> title, tables as `pl-table`."""
    if isinstance(part, Section):
        data = "".join(f' data-{esc(k)}="{esc(v)}"' for k, v in part.data)
        title = f'<h4 class="pl-cmp-h">{_inline_html(part.title)}</h4>' if part.title else ""
        body = "".join(to_html(c) for c in part.children)
        return f'<div class="{esc(part.css or "pl-section")}"{data}>{title}{body}</div>'
    if isinstance(part, Table):
        return _table_html(part)
    if isinstance(part, Markup):
        return part.html
    if isinstance(part, Figure):
        return (f'<span class="pl-figure {TONE_CLASS.get(part.tone, "")}">{esc(part.label)} '
                f"<b>{esc(part.value)}</b>{esc(part.unit)}</span>")
    if isinstance(part, Note):
        css = f"pl-finding pl-{esc(part.severity)}" + (f" {esc(part.css)}" if part.css else "")
        kind = f' data-kind="{esc(part.kind)}"' if part.kind else ""
        return (f'<p class="{css}"{kind}><span class="pl-badge">{esc(part.label)}</span> '
                f"{esc(part.text)}</p>")
    if isinstance(part, Line):
        return f'<p class="{esc(part.css)}">{_inline_html(part.parts)}</p>'
    return _inline_html((part,))


def _inline_html(parts: Sequence[Inline]) -> str:
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(esc(p))
        elif isinstance(p, Code):
            out.append(f"<code>{esc(p.text)}</code>")
        elif isinstance(p, Badge):
            out.append(f'<span class="pl-badge {TONE_CLASS.get(p.tone, "")}">{esc(p.text)}</span>')
        elif p.tone:
            out.append(f'<span class="{TONE_CLASS.get(p.tone, "")}">{esc(p.text)}</span>')
        else:
            out.append(esc(p.text))
    return "".join(out)


def _table_html(t: Table) -> str:
    def cell(tag: str, i: int, content: str) -> str:
        return f"<{tag}{' class=\"num\"' if i in t.numeric else ''}>{content}</{tag}>"

    head = "".join(cell("th", i, esc(c)) for i, c in enumerate(t.columns))
    body = "".join("<tr>" + "".join(cell("td", i, _inline_html((c,))) for i, c in enumerate(r))
                   + "</tr>" for r in t.rows)
    caption = f"<caption>{esc(t.caption)}</caption>" if t.caption else ""
    css = "pl-table" + (f" {esc(t.css)}" if t.css else "")
    return (f'<table class="{css}">{caption}<thead><tr>{head}</tr></thead><tbody>{body}'
            "</tbody></table>")
