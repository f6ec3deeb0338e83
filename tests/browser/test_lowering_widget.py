"""The lowering view's ES module in real Chromium, against an in-page fake model."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import mount
from helpers import line_of
from kernels import CATALOG

import pallaslab
from pallaslab.views.lowering import lowering_payload

KERNELS_PY = str(Path(__file__).resolve().parents[1] / "kernels.py")


pytestmark = pytest.mark.usefixtures("private_lowering_cache")


def view(name):
    fn, args = CATALOG[name].case()[:2]
    return pallaslab.inspect(fn, *args).view("lowering")


def lit(page, side):
    """IR line numbers / Python line numbers currently lit ("pl-hl") on one side."""
    return page.eval_on_selector_all(
        f'.pl-code[data-role="{side}"] .pl-line.pl-hl', "rows => rows.map(r => +r.dataset.line)")


def test_click_ir_line_lights_its_python_line_and_back(page, results_dir):
    v = view("matmul_f32")
    mount(page, "lowering.js", v.payload())
    stage = v.result().stage("mosaic")
    assert page.locator(".pl-lowering").get_attribute("data-stage") == "mosaic"
    ir_lines = stage.text.splitlines()
    matmul = next(n for n, line in enumerate(ir_lines, 1) if "tpu.matmul" in line)
    dot = line_of("acc_ref[...] += jnp.dot(")

    page.click(f'.pl-code[data-role="ir"] .pl-line[data-line="{matmul}"]')
    assert page.locator(f'.pl-code[data-role="ir"] .pl-line[data-line="{matmul}"]') \
        .get_attribute("class").split() >= ["pl-line"]
    assert "pl-sel" in page.get_attribute(
        f'.pl-code[data-role="ir"] .pl-line[data-line="{matmul}"]', "class")
    assert lit(page, "py") == [dot]
    assert page.evaluate("window.model.get('selection')") == {
        "target": "tpu-v5e", "stage": "mosaic", "ir_line": matmul,
        "py_line": f"{KERNELS_PY}:{dot}"}

    page.click(f'.pl-code[data-role="py"] .pl-line[data-line="{dot}"]')
    assert sorted(lit(page, "ir")) == sorted(stage.ir_lines_for(f"kernels.py:{dot}"))
    assert matmul in lit(page, "ir")
    assert lit(page, "py") == []
    page.screenshot(path=str(results_dir / "lowering-light.png"), full_page=True)


def test_syntax_highlighting_and_stage_picker(page):
    v = view("matmul_f32")
    mount(page, "lowering.js", v.payload())
    ops = page.eval_on_selector_all(".pl-tk-op", "els => els.map(e => e.textContent)")
    assert "tpu.matmul" in ops and "arith.addf" in ops
    assert "%arg3" in page.eval_on_selector_all(".pl-tk-var", "e => e.map(x => x.textContent)")
    page.select_option("select.pl-stage", "jaxpr")
    assert page.locator(".pl-lowering").get_attribute("data-stage") == "jaxpr"
    assert "dot_general" in page.locator('.pl-code[data-role="ir"]').inner_text()
    # jaxpr lines map to Python too
    dot = line_of("acc_ref[...] += jnp.dot(")
    page.click(f'.pl-code[data-role="py"] .pl-line[data-line="{dot}"]')
    assert sorted(lit(page, "ir")) == sorted(
        v.result().stage("jaxpr").ir_lines_for(f"kernels.py:{dot}"))


def test_diagnostics_on_top_and_resources_beside(page):
    v = view("tpu_misaligned")
    mount(page, "lowering.js", v.payload())
    (err,) = v.result().errors
    item = page.locator(f'.pl-diagnostics li.pl-error[data-code="{err.code}"]')
    assert item.count() == 1
    assert err.message in item.inner_text()
    if err.operand:
        assert item.locator(".pl-operand").inner_text() == err.operand
    assert page.locator(".pl-status").inner_text().endswith("failed")
    # the resources as the static view says them: nothing reported, and why (not compiled)
    low = v.payload()["lowerings"][v.payload()["target"]]
    assert low["resource_rows"] == [] and low["resource_line"] == "resources: known once compiled"
    assert page.locator("p.pl-resources").inner_text() == low["resource_line"]
    assert page.locator('.pl-resources tr[data-resource="vmem_bytes"]').count() == 0


def test_static_target_picker_offers_only_embedded_targets(page):
    v = view("elementwise_1d")
    assert v.result().backend == "mosaic-tpu"  # the default target, tpu-v5e
    v.select("gpu-h100")
    payload = v.payload()
    mount(page, "lowering.js", payload)
    disabled = page.eval_on_selector_all("select.pl-target option:disabled",
                                         "o => o.map(x => x.value)")
    assert "tpu-v5e" not in disabled and "gpu-h100" not in disabled and "tpu-v6e" in disabled
    assert page.locator(".pl-lowering").get_attribute("data-stage") == "ttir"
    page.select_option("select.pl-target", "tpu-v5e")
    assert page.locator(".pl-lowering").get_attribute("data-target") == "tpu-v5e"
    assert page.locator(".pl-lowering").get_attribute("data-stage") == "mosaic"
    assert page.evaluate("window.model.saved") == []  # nobody to ask in a static page


def test_live_target_pick_asks_python_and_shows_the_answer(page):
    v = view("elementwise_1d")
    mount(page, "lowering.js", v._payload(live=True))
    page.select_option("select.pl-target", "gpu-h100")
    asked = page.evaluate("window.model.saved.at(-1)")
    request = asked.pop("request")  # a fresh id per question: Python answers each one
    assert asked == {"target": "gpu-h100", "stage": None} and request
    assert "lowering for gpu-h100" in page.locator(".pl-pending").inner_text()
    # what LoweringView does on that selection: lower and send a new payload
    answer = v.select("gpu-h100")._payload(live=True)
    page.evaluate("""(p) => window.model.set('payload', window.host.revive(p))""",
                  _encoded(answer))
    assert page.locator(".pl-lowering").get_attribute("data-target") == "gpu-h100"
    assert page.locator(".pl-pending").count() == 0
    assert "tt.func" in page.locator('.pl-code[data-role="ir"]').inner_text()


def test_stage_text_not_sent_is_asked_for(page):
    v = view("elementwise_1d")
    p = lowering_payload(v.ctx.kernel, v.results, "tpu-v5e", stage="jaxpr", interactive=True,
                         budget=0)
    assert [s["text"] is None for s in p["lowerings"]["tpu-v5e"]["stages"]] == [False, True]
    mount(page, "lowering.js", p)
    page.select_option("select.pl-stage", "mosaic")
    assert page.evaluate("window.model.saved.at(-1)")["stage"] == "mosaic"
    assert "loading mosaic" in page.locator(".pl-ir-pane").inner_text()


def test_user_strings_are_text_not_markup(page, results_dir):
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from kernels import add_kernel

    evil = '<img src=x onerror="window.pwned=1">'

    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=evil, grid=(2,), in_specs=[spec, spec], out_specs=spec)(x, x)

    wb = pallaslab.inspect(fn, jax.ShapeDtypeStruct((16, 128), jnp.float32))
    mount(page, "lowering.js", wb.view("lowering").payload(), dark=True)
    assert evil in page.locator(".pl-head").inner_text()
    assert page.locator("#root img").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.requests_attempted == []
    page.screenshot(path=str(results_dir / "lowering-dark.png"), full_page=True)


def _encoded(payload):
    from pallaslab.views.report import encode_buffers

    return encode_buffers(payload)


def test_report_lowering_tab_works_offline(page, tmp_path, monkeypatch):
    from pallaslab.cli import main
    from pallaslab.views import registry

    # this tab only: other tabs' progress is not this test's business
    monkeypatch.setattr(registry, "_TABS", {n: t for n, t in registry._TABS.items()
                                            if n in ("overview", "grid", "lowering")})

    out = tmp_path / "report.html"
    assert main(["report", f"{KERNELS_PY}:matmul_f32", "-o", str(out)]) == 0
    page.allowed.add(out.as_uri())
    page.goto(out.as_uri())
    page.wait_for_selector("#pl-root[data-ready=true]", timeout=20000)
    section = page.locator("section.pl-kernel").first
    section.locator(".pl-tabs button[data-tab=lowering]").click()
    pane = section.locator(".pl-pane[data-tab=lowering]")
    pane.locator(".pl-lowering").wait_for(timeout=10000)
    dot = line_of("acc_ref[...] += jnp.dot(")
    pane.locator(f'.pl-code[data-role="py"] .pl-line[data-line="{dot}"]').click()
    lit_ir = pane.locator('.pl-code[data-role="ir"] .pl-line.pl-hl')
    assert lit_ir.count() > 0 and "tpu.matmul" in lit_ir.all_inner_texts()[-1] + "".join(
        lit_ir.all_inner_texts())
    assert [u for u in page.requests_attempted if u != out.as_uri()] == []


@pytest.mark.parametrize("lang, line, expected", [
    ("mlir", '  %3 = tpu.matmul %4, %5 {a = "s"} : vector<8x128xf32> // c',
     [("var", "%3"), ("op", "tpu.matmul"), ("var", "%4"), ("string", '"s"'),
      ("comment", "// c")]),
    ("llvm", "define void @k(ptr %0) { ; entry", [("kw", "define"), ("sym", "@k"),
                                                  ("var", "%0"), ("comment", "; entry")]),
    ("asm", "  ld.global.f32 %f1, [%rd1]; // x", [("op", "ld.global.f32"), ("var", "%f1"),
                                                    ("var", "%rd1"), ("comment", "// x")]),
    ("jaxpr", "    c:f32[8,128] = add a b", [("var", "c"), ("type", "f32"), ("num", "8"),
                                              ("op", "add"), ("var", "a"), ("var", "b")]),
    ("jaxpr", "    d:f32[] = dot_general[precision=None] c e",
     [("var", "d"), ("op", "dot_general"), ("var", "c"), ("var", "e")]),
])
def test_tokenizer(page, lang, line, expected):
    mount(page, "lowering.js", view("vector_add").payload())
    tokens = page.evaluate("([l, lang]) => window.view.tokenize(l, lang)", [line, lang])
    assert "".join(t for _, t in tokens) == line  # nothing lost or added
    classed = [(c, t) for c, t in tokens if c]
    for item in expected:
        assert tuple(item) in [tuple(x) for x in classed], (item, classed)
