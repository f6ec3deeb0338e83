"""Small helpers for static HTML: every user-derived string goes through `esc`.

`esc` and `visible_payload` are the two doors user text (kernel names, paths, printed output,
IR) passes through on its way to a page: control and bidi characters become visible marks
(`pallaslab.util.text.visible`) before any HTML escaping.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any, cast

from pallaslab.util.text import visible


def esc(value: Any) -> str:
    # visible() first: its marks (`<U+202E>`) contain '<' and must be escaped too.
    return html.escape(visible(str(value)), quote=True)


def visible_payload[T](value: T) -> T:
    """A widget payload with every string (keys too) shown visibly; buffers untouched. The
    widgets put payload strings into the DOM as text, so this is what keeps them safe."""
    return cast(T, _visible_tree(value))


def _visible_tree(value: Any) -> Any:
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {_visible_tree(k): _visible_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_visible_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_visible_tree(v) for v in value)
    return value  # numbers, None, memoryviews (binary buffers)


def shape(dims: Sequence[Any] | None) -> str:
    if dims is None:
        return "-"
    return "(" + ", ".join("None" if d is None else str(d) for d in dims) + \
        ("," if len(dims) == 1 else "") + ")"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric: Sequence[int] = ()
          ) -> str:
    """An HTML table; every cell is escaped (cells may come from user code)."""
    head = "".join(f"<th{' class=\"num\"' if i in numeric else ''}>{esc(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=\"num\"' if i in numeric else ''}>{esc(c)}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f'<table class="pl-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def findings_list(findings: Sequence[Any]) -> str:
    if not findings:
        return '<p class="pl-ok">No findings.</p>'
    items = "".join(
        f'<li class="pl-finding pl-{esc(f.severity)}"><span class="pl-badge">{esc(f.severity)}'
        f'</span> <code>{esc(f.code)}</code> {esc(f.message)}</li>'
        for f in findings
    )
    return f'<ul class="pl-findings">{items}</ul>'
