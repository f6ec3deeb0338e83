"""User strings with control, bidi and markup characters render visibly and inertly.

A kernel's `name=` is the user's: a right-to-left override (U+202E) would reorder the text
after it ("Trojan Source"), an ANSI sequence would recolour a terminal, `[/]` and `:b:` are rich
markup, and `</script>` would close the report's script element. Every view's text and HTML,
its widget payload, the workbench and the report must show such a name as `<U+202E>` marks,
with no raw ESC and no way out of an element.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from kernels import add_kernel

import pallaslab
from pallaslab.views._html import esc, visible_payload
from pallaslab.views.compare import compare_workbench

NAME = "rev\u202eelif\x1b[31m[/]:b:</script>"
VISIBLE = "rev<U+202E>elif[/]:b:</script>"  # the colour code dropped, the override shown
ESCAPED = "rev&lt;U+202E&gt;elif[/]:b:&lt;/script&gt;"
RAW = ("\u202e", "\x1b")

# The first line of each view's text, as the user reads it.
HEADS = {
    "overview": f"Kernel 0: {VISIBLE}  (",
    "grid": f"Grid of kernel 0 {VISIBLE}: 2 = 2 programs",
    "memory": f"Memory of kernel 0 {VISIBLE}",
    "pipeline": f"Pipeline of kernel 0 {VISIBLE} on TPU ",
    "step": f"Step kernel 0 {VISIBLE}: 0/2 programs run",
    "compare": f"Compare interpret, reference for kernel 0 {VISIBLE}: ",
    "lowering": f"Lowering of kernel 0 {VISIBLE} for ",
}


def hostile_kernel():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=NAME, grid=(2,), in_specs=[spec, spec], out_specs=spec,
                              interpret=True)(x, x)

    return fn, (jnp.arange(16 * 128, dtype=jnp.float32).reshape(16, 128),)


@pytest.fixture(scope="module")
def wb():
    fn, args = hostile_kernel()
    wb = pallaslab.inspect(fn, *args)
    assert wb.kernels[0].name == NAME  # Pallas keeps the name as given
    compare_workbench(wb, executors=("interpret", "reference"), reference=lambda x: x + x)
    return wb


def strings(value):
    """Every string in a payload (keys too)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from strings(v)


def assert_no_raw_controls(text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"raw U+{ord(ch):04X} in {text[:200]!r}"


def test_every_view_is_covered(wb):
    assert sorted(t.name for t in wb.tabs(0)) == sorted(HEADS)


@pytest.mark.parametrize("tab", list(HEADS))
def test_view_text_shows_the_name_visibly(wb, tab):
    text = wb.view(tab, 0)._repr_mimebundle_()["text/plain"]
    assert_no_raw_controls(text)
    assert text.startswith(HEADS[tab]), text.splitlines()[0]
    assert "[31m" not in text  # the colour code is removed, not half-shown


@pytest.mark.parametrize("tab", list(HEADS))
def test_view_html_shows_the_name_visibly_and_escaped(wb, tab):
    page = wb.view(tab, 0)._repr_mimebundle_()["text/html"]
    assert_no_raw_controls(page)
    assert f"<code>{ESCAPED}</code>" in page
    assert "</script" not in page.lower()  # the name cannot close (or open) a script


@pytest.mark.parametrize("tab", list(HEADS))
def test_view_payload_strings_are_visible(wb, tab):
    view = wb.view(tab, 0)
    for payload in (view.payload(), view.report_payload()):
        for s in strings(payload):
            assert_no_raw_controls(s)
        if "kernel" in payload and isinstance(payload["kernel"], str):
            assert payload["kernel"] == VISIBLE
    if tab == "overview":
        assert view.payload()["kernel"]["name"] == VISIBLE


def test_workbench_renderings(wb):
    bundle = wb._repr_mimebundle_()
    assert_no_raw_controls(bundle["text/plain"])
    assert_no_raw_controls(bundle["text/html"])
    assert f"<code>{ESCAPED}</code>" in bundle["text/html"]
    assert "</script" not in bundle["text/html"].lower()


def test_report_shows_the_name_visibly_and_keeps_its_scripts(wb):
    report = wb.report(title=NAME)
    assert_no_raw_controls(report)
    assert f"<title>pallaslab report: {ESCAPED}</title>" in report
    assert f"<code>{ESCAPED}</code>" in report  # the <noscript> static views
    # the data block and the host module end where they should: the data holds no '<' at all
    assert report.lower().count("</script") == 2
    block = re.search(r'<script type="application/json" id="pl-data">(.*?)</script>', report,
                      re.S).group(1)
    assert "<" not in block
    data = json.loads(block)
    kernel = data["kernels"][0]
    assert kernel["title"] == f"Kernel 0: {VISIBLE}"
    assert {t["payload"]["kernel"] for t in kernel["tabs"]
            if isinstance(t["payload"].get("kernel"), str)} == {VISIBLE}
    for s in strings(data["kernels"]):
        assert_no_raw_controls(s)


def sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_report_csp_allows_only_its_own_script_and_style(wb):
    report = wb.report(title="csp")
    policy = html.unescape(re.search(
        r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', report).group(1))
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives["default-src"] == ["'none'"]
    host = re.search(r'<script type="module">(.*?)</script>', report, re.S).group(1)
    style = re.search(r"<style>(.*?)</style>", report, re.S).group(1)
    # exactly the hashed host module, and the blob: modules it creates; nothing inline
    assert directives["script-src"] == [sha256(host), "blob:"]
    assert directives["style-src"] == [sha256(style)]
    assert "'unsafe-inline'" not in " ".join(directives["script-src"] + directives["style-src"])
    assert not re.search(r"https?:|\*|'unsafe-eval'|'strict-dynamic'", policy)


def test_visible_payload_keeps_buffers_and_is_idempotent():
    buf = memoryview(b"\x1b\xe2\x80\xae")  # binary data is never rewritten
    payload = {"name\u202e": [NAME, ("a\x07",), 3, None, buf]}
    shown = visible_payload(payload)
    assert shown == {"name<U+202E>": [VISIBLE, ("a<U+0007>",), 3, None, buf]}
    assert shown["name<U+202E>"][4] is buf
    assert visible_payload(shown) == shown
    assert esc(NAME) == ESCAPED and esc(esc(NAME)) != ESCAPED  # escaping is not idempotent
