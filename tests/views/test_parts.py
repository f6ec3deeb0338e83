"""The parts a view's tree is made of, and the shared renderers: text, static HTML and rich
(issue 37, item 1: one structure per view)."""

from __future__ import annotations

import io

from rich.console import Console

from pallaslab.cli._parts import to_rich
from pallaslab.views.parts import (
    Badge,
    Code,
    Figure,
    Line,
    Markup,
    Note,
    Section,
    Table,
    Text,
    plain,
    to_html,
    to_text,
)

TREE = Section(("Compare ", Code("k<x>")), (
    Section(("executors",), (Line(("interpret: ", Text("ran", "ok"))),)),
    Note("device did not run", "warning", "incomplete"),
    Table(("a", "max abs"), (("interpret", "0.5"), ("reference", "12")), numeric=(1,)),
    Figure("max ulp", "4"),
    Markup('<svg role="img"></svg>', "a map"),
))


def test_text_indents_children_under_their_titles():
    assert to_text(TREE).splitlines() == [
        "Compare k<x>",
        "  executors:",
        "    interpret: ran",
        "  incomplete: device did not run",
        "  a          max abs",
        "  interpret      0.5",
        "  reference       12",
        "  max ulp 4",
        "  a map",
    ]


def test_text_wraps_at_a_width_and_shows_control_characters():
    text = to_text(Note("word " * 30 + "\u202e", "warning"), width=40)
    assert all(len(line) <= 40 for line in text.splitlines())
    assert text.startswith("warning: word") and "<U+202E>" in text


def test_html_escapes_every_string_but_the_views_own_markup():
    html = to_html(TREE)
    assert "<code>k&lt;x&gt;</code>" in html and '<span class="pl-ok">ran</span>' in html
    assert ('<p class="pl-finding pl-warning" data-kind="incomplete"><span class="pl-badge">'
            "incomplete</span> device did not run</p>") in html
    assert '<th class="num">max abs</th>' in html and '<td class="num">0.5</td>' in html
    assert '<svg role="img"></svg>' in html and "a map" not in html
    assert to_html(Badge("<b>", "bad")) == '<span class="pl-badge pl-cmp-bad">&lt;b&gt;</span>'


def test_rich_shows_the_same_tree_and_never_reads_user_text_as_markup():
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(to_rich(Section(("[bold]x[/]",), (
        Note("[red]y", "error", "line"), TREE))))
    text = out.getvalue()
    assert "[bold]x[/]" in text and "line: [red]y" in text
    assert "incomplete: device did not run" in text and "reference" in text and "0.5" in text


def test_plain_joins_inline_parts():
    assert plain(("a ", Code("b"), Badge("c"), Text("d", "dim"))) == "a bcd"
