"""The Lowering view: its pure payload, line maps, caps, text and HTML, the tab, the widget."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import line_of, workbench
from jax.experimental import pallas as pl
from kernels import CATALOG, add_kernel

import pallaslab
from pallaslab import lowering
from pallaslab.lowering import KernelLowering, Resources, Stage
from pallaslab.views import lowering as lv
from pallaslab.views import registry
from pallaslab.views.context import KernelContext
from pallaslab.views.lowering_tree import HTML_STAGE_CAP
from pallaslab.views.report import encode_buffers

KERNELS_PY = str(Path(__file__).resolve().parents[1] / "kernels.py")
EVIL = "<script>alert(1)</script>"

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason='needs libtpu (pip install "pallaslab[tpu]")')


pytestmark = pytest.mark.usefixtures("private_lowering_cache")


def triples(stage_payload):
    return np.frombuffer(stage_payload["map"], "<i4").reshape(-1, 3).tolist()


def evil_workbench():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=EVIL, grid=(2,), in_specs=[spec, spec], out_specs=spec)(x, x)

    return pallaslab.inspect(fn, jax.ShapeDtypeStruct((16, 128), jnp.float32))


# --- the pure payload -------------------------------------------------------------------------


def test_payload_has_every_stage_and_its_text():
    view = workbench("matmul_f32").lowering()
    result = view.result()
    p = view.payload()
    json.dumps(encode_buffers(p))  # JSON-able once the maps are encoded
    assert p["target"] == "tpu-v5e" and p["stage"] == "mosaic"
    assert p["kernel"] == "matmul_kernel" and p["source"] == f"kernels.py:{line_of('def matmul_k')}"
    assert list(p["lowerings"]) == ["tpu-v5e"]
    low = p["lowerings"]["tpu-v5e"]
    assert low["backend"] == "mosaic-tpu" and low["ok"] and not low["compiled"]
    assert [s["name"] for s in low["stages"]] == ["jaxpr", "mosaic"]
    for s in low["stages"]:
        text = result.stage(s["name"]).text
        assert s["text"] == text and s["chars"] == len(text)
        assert s["lines"] == s["sent_lines"] == len(text.splitlines())
    lowered = {t["name"]: t["lowered"] for t in p["targets"]}
    assert set(lowered) == set(lowering.TARGETS) and lowered == {
        name: name == "tpu-v5e" for name in lowering.TARGETS}
    assert low["resources"] == Resources().to_json() and low["diagnostics"] == []


def test_line_maps_match_the_lowering_and_the_source_shown():
    view = workbench("matmul_f32").lowering()
    p = view.payload()
    dot = line_of("acc_ref[...] += jnp.dot(")
    for s in p["lowerings"]["tpu-v5e"]["stages"]:
        stage = view.result().stage(s["name"])
        got = [(ir, f"{p['files'][f]['path']}:{py}") for ir, f, py in triples(s)]
        assert got == list(stage.source_lines) and got  # every IR line with a location
        assert [ir for ir, src in got if src.endswith(f":{dot}")] == list(
            stage.ir_lines_for(f"kernels.py:{dot}"))
    # the Python shown beside the IR: the kernel body, with exact line numbers
    assert p["files"] == [{"path": KERNELS_PY, "name": "kernels.py"}]
    (chunk,) = p["sources"]
    assert chunk["start"] == line_of("def matmul_kernel(")
    assert chunk["lines"][dot - chunk["start"]].strip().startswith("acc_ref[...] += jnp.dot(")
    shown = range(chunk["start"], chunk["start"] + len(chunk["lines"]))
    assert all(py in shown for s in p["lowerings"]["tpu-v5e"]["stages"]
               for _, _, py in triples(s))


def test_index_map_lines_elsewhere_get_their_own_chunk():
    p = workbench("scalar_prefetch_gather").lowering().payload()
    starts = [c["start"] for c in p["sources"]]
    assert starts[0] == line_of("def gather_kernel(") and len(starts) == 2
    lines = {c["start"] + i for c in p["sources"] for i in range(len(c["lines"]))}
    mapped = {py for s in p["lowerings"]["tpu-v5e"]["stages"] for _, _, py in triples(s)}
    assert mapped and mapped <= lines


def test_default_targets_follow_the_kernel_and_the_workbench():
    assert workbench("matmul_f32").lowering().target == "tpu-v5e"
    assert workbench("gpu_mesh_kernel").lowering().target == "gpu-h100"
    assert workbench("elementwise_1d", targets=["gpu-a100"]).lowering().target == "gpu-a100"
    from jax.experimental.pallas import triton as plt

    def fn(x):
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=plt.CompilerParams(num_warps=2))(x, x)

    wb = pallaslab.inspect(fn, jax.ShapeDtypeStruct((256,), jnp.float32))
    view = wb.lowering()
    assert view.target == "gpu-h100" and view.payload()["stage"] == "ttir"
    # only the default target is lowered until another is asked for (cheap by default)
    assert list(view.results) == ["gpu-h100"] and not view.results["gpu-h100"].compiled


def test_other_target_is_lowered_on_request_and_both_are_kept():
    view = workbench("elementwise_1d").lowering()
    assert view.payload()["target"] == "tpu-v5e"
    view.select("gpu-h100", stage="jaxpr")
    p = view.payload()
    assert p["target"] == "gpu-h100" and p["stage"] == "jaxpr"
    assert list(p["lowerings"]) == ["tpu-v5e", "gpu-h100"]
    assert [s["name"] for s in p["lowerings"]["gpu-h100"]["stages"]] == ["jaxpr", "ttir"]
    assert view.select("h100", stage="no-such-stage").payload()["stage"] == "ttir"
    explicit = lv.LoweringView(view.ctx, target="v6e")
    assert explicit.target == "tpu-v6e" and list(explicit.results) == ["tpu-v6e"]


def _big_lowering(lines: int) -> KernelLowering:
    text = "".join(f"  %{i} = arith.addf %a, %b : vector<8x128xf32>\n" for i in range(lines))
    body = f"{KERNELS_PY}:{line_of('o_ref[...] = x_ref[...] + y_ref[...]')}"
    return KernelLowering(
        name="big", index=0, backend="mosaic-tpu", ok=True,
        stages=(Stage("jaxpr", "{ lambda ; a. let b = neg a in (b) }\n", ((1, body),)),
                Stage("mosaic", text, tuple((n, body) for n in range(1, lines + 1))),
                Stage("mosaic:post-apply-vector-layout", text)),
        diagnostics=(), resources=Resources())


def test_large_stages_are_capped_and_sent_lazily():
    kernel = workbench("elementwise_1d").kernels[0]
    big = _big_lowering(40_000)  # ~2 MB per stage, like a compiled flash attention's dumps
    p = lv.lowering_payload(kernel, {"tpu-v5e": big}, "tpu-v5e", budget=lv.LIVE_BUDGET)
    jaxpr, mosaic, passes = p["lowerings"]["tpu-v5e"]["stages"]
    assert p["stage"] == "mosaic"
    assert mosaic["text"] is not None and len(mosaic["text"]) <= lv.STAGE_TEXT_CAP
    assert mosaic["lines"] == 40_000 and mosaic["sent_lines"] == mosaic["text"].count("\n") + 1
    assert mosaic["sent_lines"] < 40_000 and mosaic["text"].endswith("vector<8x128xf32>")
    assert len(triples(mosaic)) == mosaic["sent_lines"]  # no map entries past the cut
    assert jaxpr["text"] is not None  # small: it fits the budget
    assert passes["text"] is None and len(passes["map"]) == 0  # sent when asked for
    assert lv.payload_nbytes(p) < lv.LIVE_BUDGET + 300_000
    # the shown stage is always sent, whatever the budget
    p = lv.lowering_payload(kernel, {"tpu-v5e": big}, "tpu-v5e",
                            stage="mosaic:post-apply-vector-layout", budget=0)
    assert [s["text"] is not None for s in p["lowerings"]["tpu-v5e"]["stages"]] == [
        False, False, True]


def test_cap_text_cuts_at_a_line_end():
    assert lv.cap_text("ab\ncd\nef", 7) == "ab\ncd"
    assert lv.cap_text("abc", 10) == "abc"
    assert lv.cap_text("abcdef", 3) == "abc"


def test_kernel_named_script_is_escaped_in_html_and_raw_in_data():
    wb = evil_workbench()
    view = wb.lowering()
    p = view.payload()
    assert p["kernel"] == EVIL  # data: the widget inserts it with textContent
    html = view.to_html()
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert EVIL in view.to_text()
    bundle = view._repr_mimebundle_()
    assert "<script>alert" not in bundle["text/html"]


def test_ir_is_escaped_in_html():
    kernel = workbench("elementwise_1d").kernels[0]
    ir = 'module { "<b>bold</b>" & <img src=x> }'
    low = KernelLowering("k", 0, "mosaic-tpu", True, (Stage("mosaic", ir),), (), Resources())
    view = lv.LoweringView(KernelContext(kernel))
    view._results["tpu-v5e"] = low
    html = view.to_html()
    assert "<img" not in html and "<b>" not in html
    assert "&lt;img src=x&gt;" in html and "&amp;" in html


# --- text and static HTML --------------------------------------------------------------------


def test_text_has_diagnostics_resources_and_stage_names():
    view = workbench("tpu_misaligned").lowering()
    (err,) = view.result().errors
    text = view.to_text()
    first, *rest = text.splitlines()
    assert first.removesuffix(" (cached)") == (  # cached: an earlier run lowered it
        "Lowering of kernel 0 add_kernel for tpu-v5e (mosaic-tpu): FAILED, not compiled")
    assert f"  error {err.code}" in text and err.message.splitlines()[0] in text
    if err.operand:
        assert f"[{err.operand}]" in text
    assert "  resources: known once compiled" in rest
    lines = len(view.result().stage("jaxpr").text.splitlines())
    assert rest[-2:] == ["  stages:", f"    jaxpr ({lines} lines)"]


def test_html_has_diagnostics_resources_and_collapsible_stages():
    view = workbench("tpu_misaligned").lowering()
    (err,) = view.result().errors
    html = view.to_html()
    assert '<p class="pl-finding pl-error"><span class="pl-badge pl-cmp-bad">error</span> ' \
           f"<code>{err.code}</code>" in html
    if err.operand:
        assert f'<span class="pl-dim"> [{err.operand}]</span>' in html
    assert "resources: known once compiled" in html
    ok = workbench("matmul_f32").lowering()
    html = ok.to_html()
    assert html.count('<details class="pl-stage"') == 2
    assert '<details class="pl-stage" data-stage="mosaic"><summary><code>mosaic</code>' in html
    assert "tpu.matmul" in html and '<pre class="pl-ir">' in html
    assert '<p class="pl-ok"><span class="pl-ok">no diagnostics</span></p>' in html


def test_static_html_caps_huge_stages():
    kernel = workbench("elementwise_1d").kernels[0]
    view = lv.LoweringView(KernelContext(kernel))
    view._results["tpu-v5e"] = _big_lowering(40_000)
    html = view.to_html()
    assert len(html) < 3 * HTML_STAGE_CAP + 10_000
    assert "more lines (the full text is in" in html


# --- the tab, the workbench, the report ------------------------------------------------------


def test_tab_is_registered_and_available():
    tab = registry.tab("lowering")
    assert tab.title == "Lowering" and tab.build is lv.LoweringView
    wb = workbench("matmul_f32")
    assert "lowering" in [t.name for t in wb.tabs()]
    assert isinstance(wb.lowering(), lv.LoweringView)
    assert wb.lowering() is wb.view("lowering")  # built once per kernel
    mesh = workbench("gpu_mesh_kernel")
    assert "lowering" in [t.name for t in mesh.tabs()]


def only_tabs(monkeypatch, *names):
    """Keep other tabs (and their progress) out of a test about this one."""
    monkeypatch.setattr(registry, "_TABS", {n: t for n, t in registry._TABS.items()
                                            if n in names})


def test_workbench_text_html_and_report_include_the_lowering(monkeypatch):
    only_tabs(monkeypatch, "overview", "lowering")
    wb = workbench("vector_add")
    assert "Lowering of kernel 0 add_kernel for tpu-v5e" in wb.to_text()
    assert '<details class="pl-stage" data-stage="mosaic">' in wb.to_html()
    report = wb.report()
    assert "lowering.js" in report


# --- the live widget -------------------------------------------------------------------------


def test_widget_selection_lowers_the_new_target_and_sends_stage_texts():
    pytest.importorskip("anywidget")
    view = workbench("elementwise_1d").lowering()
    w = view.widget
    assert w.payload["interactive"] and w.payload["target"] == "tpu-v5e"
    w.selection = {"target": "gpu-h100", "stage": None}
    assert w.payload["target"] == "gpu-h100" and w.payload["stage"] == "ttir"
    assert view.target == "gpu-h100"
    revision = w.payload["revision"]
    # clicks (ir_line / py_line) for what is already shown do not re-send anything
    w.selection = {"target": "gpu-h100", "stage": "ttir", "ir_line": 3}
    assert w.payload["revision"] == revision
    # a stage whose text was not sent is sent on request
    view._sent.discard(("gpu-h100", "jaxpr"))
    w.selection = {"target": "gpu-h100", "stage": "jaxpr"}
    assert w.payload["stage"] == "jaxpr" and w.payload["revision"] == revision + 1


def test_compile_without_libtpu_says_what_to_install(monkeypatch):
    view = workbench("vector_add").lowering()
    view.result()
    monkeypatch.setitem(sys.modules, "libtpu", None)
    view.select(compile=True)
    assert view.error is not None and 'pip install "pallaslab[tpu]"' in view.error
    p = view.payload()
    assert p["error"] == view.error and p["target"] == "tpu-v5e"
    assert not p["lowerings"]["tpu-v5e"]["compiled"]
    assert 'pallaslab[tpu]' in view.to_text() and "pallaslab[tpu]" in view.to_html()


def test_a_lowering_that_cannot_run_is_shown_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path))  # no cached result to fall back on
    monkeypatch.setitem(sys.modules, "absl", None)
    wb = workbench("gpu_mesh_kernel")
    view = wb.lowering()
    p = view.payload()
    assert p["lowerings"] == {} and p["stage"] is None
    assert "'absl-py'" in p["error"] and 'pip install "pallaslab[gpu]"' in p["error"]
    assert view.to_text().startswith("Lowering of kernel 0 body for gpu-h100: ")
    assert "absl-py" in view.to_html() and "absl-py" in wb.to_text()


@needs_libtpu
@pytest.mark.tpu_compiler
def test_compile_on_request_adds_the_compilers_passes():
    view = workbench("vector_add").lowering()
    assert not view.result().compiled
    view.select(compile=True)
    assert view.error is None
    low = view.payload()["lowerings"]["tpu-v5e"]
    assert low["compiled"] and low["ok"]
    names = [s["name"] for s in low["stages"]]
    assert names[:2] == ["jaxpr", "mosaic"] and "mosaic:post-apply-vector-layout" in names
    assert "compiled" in view.to_text().splitlines()[0]


# --- no ANSI colour anywhere; the jaxpr stage linked to Python (issue 10, item 5) ------------


def coloured_jaxpr(kernel) -> str:
    """The kernel's jaxpr as JAX prints it inside Jupyter (a ZMQ shell turns colour on)."""
    params = kernel.handle.eqn.params
    jaxpr = params["jaxpr"]
    return str(jaxpr.pretty_print(source_info=True, name_stack=False, use_color=True))


def test_coloured_jaxpr_stage_has_no_escapes_and_links_python_lines():
    wb = workbench("matmul_f32")
    k = wb.kernels[0]
    text = coloured_jaxpr(k)
    assert "\x1b[" in text  # what Jupyter users get from JAX
    plain = lowering.lower(k, target="tpu-v5e").kernels[0]
    coloured = KernelLowering(name=plain.name, index=plain.index, backend=plain.backend,
                              ok=plain.ok, stages=(Stage("jaxpr", text), *plain.stages[1:]),
                              diagnostics=plain.diagnostics, resources=plain.resources)
    p = lv.lowering_payload(k, {"tpu-v5e": coloured}, "tpu-v5e", stage="jaxpr")
    stage = next(s for s in p["lowerings"]["tpu-v5e"]["stages"] if s["name"] == "jaxpr")
    assert stage["text"] and "\x1b" not in stage["text"] and "<U+001B>" not in stage["text"]
    assert "# " not in stage["text"]  # the location comments became the map
    rows = triples(stage)
    assert rows, "the jaxpr stage says 'no Python locations'"
    files = p["files"]
    assert {files[f]["path"] for _, f, _ in rows} == {KERNELS_PY}
    assert line_of("acc_ref[...] += jnp.dot") in {py for _, _, py in rows}
    assert "\x1b" not in json.dumps(encode_buffers(p))
    # the view cleans what it lowers (and what the disk cache hands back) for text and HTML
    view = wb.lowering()
    view._results["tpu-v5e"] = lv.clean_lowering(coloured)
    assert "\x1b" not in view.to_text() and "\x1b" not in view.to_html()


def test_step_equations_cut_inside_a_colour_sequence_leave_no_escape():
    from pallaslab.views.step import MAX_TEXT, equation_entry

    eqn = type("Eqn", (), {})()
    # a long coloured equation whose cut at MAX_TEXT falls inside an escape sequence
    text = "a" * (MAX_TEXT - 3) + "\x1b[35m:f32[8,128]\x1b[39m = add b c"
    eqn.index, eqn.primitive, eqn.text, eqn.source, eqn.outputs = 0, "add", text, None, ()
    entry = equation_entry(eqn)
    assert "\x1b" not in entry["text"] and "[35m" not in entry["text"]
    assert entry["text"].startswith("aaa")


# --- resources after a libtpu compile (issue 10, item 9) -------------------------------------


@needs_libtpu
@pytest.mark.tpu_compiler
def test_libtpu_compile_fills_vmem_and_smem_and_says_where_from():
    # matmul_f32: 128^3 f32 blocks, 2 x 3 blocks of 64 KiB + the 64 KiB accumulator = 448 KiB,
    # exactly what --vmem-exact measures (docs/architecture.md); no SMEM buffers
    view = workbench("matmul_f32").lowering()
    view.select(compile=True)
    low = view.payload()["lowerings"]["tpu-v5e"]
    assert low["compiled"] and low["ok"]
    assert low["resources"]["vmem_bytes"] == 448 * 1024
    assert low["resources"]["smem_bytes"] == 0
    assert low["resource_notes"]["vmem_bytes"].startswith(
        "libtpu: buffers the compiled module declares (blocks double-buffered), not its need")
    rows = {line.split()[0]: line.split()[1:] for line in view.to_text().splitlines()}
    assert rows["VMEM"][:4] == ["448.0", "KiB", "libtpu:", "buffers"]
    assert rows["SMEM"] == ["0", "B", "libtpu:", "buffers", "of", "the", "compiled", "module"]
    assert "--vmem-exact measures the need" in view.to_html()
    # scalar prefetch lives in SMEM: 6 int32 indices in the compiler's 128-wide tiling
    fn, args = CATALOG["scalar_prefetch_gather"].case()[:2]
    (k,) = lowering.lower(fn, *args, target="tpu-v5e", compile=True).kernels
    assert k.resources.smem_bytes == 128 * 4
    assert k.resources.vmem_bytes == 2 * 2 * 8 * 128 * 4


def test_compile_that_says_nothing_about_vmem_shows_the_estimate_labelled():
    wb = workbench("matmul_f32")
    k = wb.kernels[0]
    plain = lowering.lower(k, target="tpu-v5e").kernels[0]
    silent = KernelLowering(name=plain.name, index=plain.index, backend="mosaic-tpu", ok=True,
                            stages=plain.stages, diagnostics=(), resources=Resources(),
                            compiled=True)
    p = lv.lowering_payload(k, {"tpu-v5e": silent}, "tpu-v5e")
    low = p["lowerings"]["tpu-v5e"]
    assert low["resources"]["vmem_bytes"] == 448 * 1024
    assert low["resource_notes"]["vmem_bytes"].startswith("estimate: ")
    # the text and HTML show the known resources as a table, each with its source
    view = wb.lowering()
    view._results["tpu-v5e"] = silent
    text = view.to_text().splitlines()
    assert text[0].endswith("(mosaic-tpu): ok, compiled")
    assert text[2].split() == ["resource", "value", "source"]
    assert text[3].split()[:5] == ["VMEM", "448.0", "KiB", "estimate:", "pallaslab's"]
    assert text[4].strip() == "stages:"  # SMEM, registers, spills: nobody reported them
    # the widget gets the same rows, to draw as they are (not its own wording of them)
    assert low["resource_rows"] == [["vmem_bytes", "VMEM", "448.0 KiB",
                                     low["resource_notes"]["vmem_bytes"]]]
    assert low["resource_line"] is None
    assert "<th>resource</th>" in view.to_html() and "<td>VMEM</td>" in view.to_html()
    # not compiled: nothing to report, no label
    p = lv.lowering_payload(k, {"tpu-v5e": plain}, "tpu-v5e")
    assert p["lowerings"]["tpu-v5e"]["resources"]["vmem_bytes"] is None
    assert p["lowerings"]["tpu-v5e"]["resource_notes"] == {}
    assert p["lowerings"]["tpu-v5e"]["resource_line"] == "resources: known once compiled"


def test_module_buffers_reads_the_compiled_signature():
    from pallaslab.lowering.tpu_compile import module_buffers

    sig = ('func.func @k(%arg0: i32 {llo.type = i32}, %idx: i32 {llo.type = memref<6xi32, '
           '#xir.tiled<(128),[1]>, #xir.memory_space<smem, tc>>}, %x: i32 {llo.type = '
           'memref<20x130xbf16, #xir.tiled<(16,128)(2,1),[1,1]>, #xir.memory_space<vmem, tc>>}'
           ', %o: i32 {llo.type = memref<8x128xf32, #xir.tiled<(8,128),[1,1]>, '
           '#xir.memory_space<vmem, tc>>}, %s: i32 {llo.type = memref<8x128xf32, '
           '#xir.tiled<(8,128),[1,1]>, #xir.memory_space<vmem, tc>>}) attributes '
           '{iteration_bounds = array<i64: 6>, scalar_prefetch = 1 : i64, scratch_operands = '
           '1 : i64, window_params = [{transform_indices = @t0, window_bounds = array<i64: 20, '
           '130>}, {pipeline_mode = #tpu.pipeline_mode<synchronous>, transform_indices = @t1}]'
           ', xir.main} {\n  return\n}\n')
    b = module_buffers(sig)
    # x: 32 x 256 bf16 padded, double-buffered; o: synchronous (one buffer); s: scratch once
    assert b.vmem_bytes == 2 * 32 * 256 * 2 + 8 * 128 * 4 + 8 * 128 * 4
    assert b.smem_bytes == 128 * 4
    assert module_buffers("module {}").vmem_bytes is None


# --- every request gets one answer (issue 10, item 8) -----------------------------------------


def test_reselecting_the_shown_target_is_answered_not_left_pending():
    pytest.importorskip("anywidget")
    view = workbench("elementwise_1d").lowering()
    w = view.widget
    assert w.payload["target"] == "tpu-v5e" and w.payload["answered"] is None
    revision = w.payload["revision"]
    # the shown target asked for again: nothing to lower, but the widget waits for an answer
    w.selection = {"target": "tpu-v5e", "stage": None, "request": "s-1"}
    assert w.payload["answered"] == "s-1" and w.payload["revision"] == revision + 1
    assert w.payload["target"] == "tpu-v5e" and w.payload["error"] is None
    # a compile asked for twice: the second has nothing to do and is answered too
    w.selection = {"target": "tpu-v5e", "stage": "mosaic", "request": "s-2"}
    assert w.payload["answered"] == "s-2"
    # another target then the shown one again, as fast as a user clicks: both answered, in order
    w.selection = {"target": "gpu-h100", "stage": None, "request": "s-3"}
    assert (w.payload["answered"], w.payload["target"]) == ("s-3", "gpu-h100")
    w.selection = {"target": "tpu-v5e", "stage": None, "request": "s-4"}
    assert (w.payload["answered"], w.payload["target"]) == ("s-4", "tpu-v5e")
    # the same request delivered twice is answered once
    revision = w.payload["revision"]
    w.selection = {"target": "tpu-v5e", "stage": None, "request": "s-4", "ir_line": 1}
    assert w.payload["revision"] == revision


def test_a_failed_request_answers_with_its_error(monkeypatch):
    pytest.importorskip("anywidget")
    view = workbench("elementwise_1d").lowering()
    w = view.widget

    def boom(*a, **kw):
        raise RuntimeError("the compiler worker went away")

    monkeypatch.setattr(view, "result", boom)
    with pytest.raises(RuntimeError):  # a bug of ours is still raised (the kernel logs it) ...
        w.selection = {"target": "gpu-h100", "stage": None, "request": "f-1"}
    # ... after the widget got an answer that says what failed
    assert w.payload["answered"] == "f-1"
    assert "lowering for gpu-h100 failed: RuntimeError: the compiler worker went away" in \
        w.payload["error"]
