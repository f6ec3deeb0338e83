"""The Memory view: per-chip VMEM payloads checked by hand, what-if rows, text/HTML, the tab."""

import json

import jax
import jax.numpy as jnp
import pytest
from helpers import copy_kernel_named, workbench
from kernels import CATALOG, matmul

import pallaslab
from pallaslab.views.memory import MemoryView
from pallaslab.views.memory_payload import memory_payload
from pallaslab.views.memory_tree import bar_scale
from pallaslab.views.registry import tab, tabs
from pallaslab.workbench import Workbench

KiB, MiB = 1024, 1 << 20
S = jax.ShapeDtypeStruct
EVIL = '<img src=x onerror="alert(1)">&</script>'


def test_matmul_f32_payload_by_hand():
    # 128^3 f32 blocks: 2 buffers x 64 KiB for each of x, y, out; the f32 accumulator once.
    p = workbench("matmul_f32").memory().payload()
    assert [c["chip"] for c in p["chips"]] == ["v5e", "v6e"]  # the default chips
    block = 128 * 128 * 4
    for c, limit in zip(p["chips"], (16 * MiB, 32 * MiB), strict=True):
        assert [(o["origin"], o["role"], o["buffers"], o["buffer_bytes"], o["bytes"])
                for o in c["operands"]] == [
            ("args[0]", "input", 2, block, 2 * block), ("args[1]", "input", 2, block, 2 * block),
            ("outputs", "output", 2, block, 2 * block), ("scratch[0]", "scratch", 1, block, block)]
        assert c["bytes"] == 448 * KiB
        assert (c["limit"], c["limit_source"], c["fits"], c["over"]) == (
            limit, "chip default", True, 0)
        assert c["capacity"] == 128 * MiB and c["smem_bytes"] == 0
        assert c["target"] == f"tpu-{c['chip']}" and c["spill_note"] is None
    assert p["what_if"] is None and p["note"] is None
    assert bar_scale(p["chips"]) == 128 * MiB  # the chips' VMEM: a share, not a zoom
    json.dumps(p)  # small and plain: no binary buffers needed


def test_vmem_overflow_does_not_fit_and_says_by_how_much():
    view = workbench("vmem_overflow").memory()
    p = view.payload()
    v5e, v6e = p["chips"]
    # (1024, 2048) f32 = 8 MiB: 2 in + 2 out + 1 scratch = 40 MiB.
    assert v5e["bytes"] == v6e["bytes"] == 40 * MiB
    assert (v5e["fits"], v5e["over"]) == (False, 24 * MiB)
    assert (v6e["fits"], v6e["over"]) == (False, 8 * MiB)
    assert "float32[1024, 2048]" in v5e["spill_note"]
    html = view.to_html()
    assert "overflow by 24.00 MiB" in html and "overflow by 8.00 MiB" in html
    assert '<td class="num"><span class="pl-cmp-bad">NO</span></td>' in html
    assert "spill" in html
    text = view.to_text()
    assert "body on v5e: 40.00 MiB of 16.00 MiB scoped VMEM (chip default) -- DOES NOT FIT" in text
    assert "note: the kernel body computes a float32[1024, 2048] value" in text


def test_smem_operands_are_listed_apart_from_the_vmem_bar():
    p = workbench("scalar_prefetch_gather").memory().payload()
    c = p["chips"][0]
    assert c["smem_bytes"] == 24  # 6 int32 block indices, scalar-prefetched
    assert c["operands"][-1]["origin"] == "args[0]" and c["operands"][-1]["space"] == "smem"
    assert c["bytes"] == 2 * 2 * 8 * 128 * 4  # only the VMEM operands count against the limit


def test_chips_come_from_the_workbench_or_the_caller():
    assert workbench("matmul_f32", chips=["tpu-v6e"]).memory().chips == ("v6e",)
    wb = workbench("matmul_f32")
    view = wb.memory(chips=("v4", "tpu-v5e"))
    assert [c["chip"] for c in view.payload()["chips"]] == ["v4", "v5e"]
    assert wb.memory() is view  # the tab now shows those chips
    ctx = wb.context(0)
    assert tab("memory").build(ctx, chips="v6e").chips == ("v6e",)
    assert MemoryView(ctx, chips="v5p").chips == ("v5p",)
    with pytest.raises(ValueError, match="unknown TPU chip 'v9'"):
        MemoryView(ctx, chips=("v9",))


def make_matmul(blocks):
    bm, bk, bn = blocks
    x = S((4096, 4096), jnp.float32)
    return lambda a, b: matmul(a, b, bm=bm, bk=bk, bn=bn), (x, x)


def test_what_if_table_best_first_and_too_large_marked():
    candidates = [(2048, 2048, 2048), (256, 256, 256), (128, 128, 128), (0, 0, 0)]
    view = workbench("matmul_f32").memory(what_if=(make_matmul, candidates))
    w = view.payload()["what_if"]
    assert w["chips"] == ["v5e", "v6e"]
    rows = [(r["block_sizes"], r["fits"]) for r in w["rows"]]
    # fitting rows first (fastest first), then the one over the limit, then the broken one
    assert rows[-2:] == [("(2048, 2048, 2048)", False), ("(0, 0, 0)", False)]
    assert {rows[0][0], rows[1][0]} == {"(256, 256, 256)", "(128, 128, 128)"}
    assert w["best"] == 0
    big = w["rows"][2]
    # 2048^2 f32 = 16 MiB per block: 6 buffers + the accumulator = 112 MiB
    assert [c["vmem_bytes"] for c in big["chips"]] == [112 * MiB] * 2
    assert [c["fits"] for c in big["chips"]] == [False, False]
    assert w["rows"][3]["error"] and "ZeroDivisionError" not in w["rows"][3]["block_sizes"]
    times = [r["chips"][0]["predicted_time"] for r in w["rows"][:2]]
    assert times == sorted(times) and all(t > 0 for t in times)
    html = view.to_html()
    assert "What-if" in html and "fits no chip" in html and "best" in html
    assert "What-if: block sizes, best first:" in view.to_text()


def test_what_if_updates_a_view_in_place():
    ctx = workbench("matmul_f32").context(0)
    view = MemoryView(ctx)
    assert view.payload()["what_if"] is None
    assert view.what_if(make_matmul, [(128, 128, 128)]) is view
    assert [r["block_sizes"] for r in view.payload()["what_if"]["rows"]] == ["(128, 128, 128)"]


def test_user_strings_are_escaped():
    ctx = Workbench(copy_kernel_named(EVIL)).context(0)

    def make(candidate):
        raise ValueError(candidate)

    view = MemoryView(ctx, what_if=(make, [EVIL]))
    html = view.to_html()
    assert EVIL not in html and "<img" not in html and "</script>" not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&lt;/script&gt;" in html
    assert EVIL in view.to_text()


def test_memory_payload_is_pure_over_occupancies():
    from pallaslab.analysis.occupancy import occupancy

    k = workbench("matmul_bf16").kernels[0]
    p = memory_payload(k, [occupancy(k, "v6e")])
    assert p["chips"][0]["bytes"] == 6 * 32 * KiB + 64 * KiB  # bf16 blocks, f32 accumulator
    assert p["kernel"] == "matmul_kernel" and p["index"] == 0


def test_tab_is_registered_and_available_for_tpu_triton_and_mosaic_gpu_kernels():
    assert "memory" in [t.name for t in tabs()]
    assert "memory" in [t.name for t in workbench("matmul_f32").tabs()]
    assert "memory" in [t.name for t in gpu_softmax_workbench().tabs()]
    assert "memory" in [t.name for t in workbench("gpu_mesh_kernel").tabs()]
    bundle = workbench("matmul_f32").memory()._repr_mimebundle_()
    assert "448.0 KiB" in bundle["text/plain"] and "<style>" in bundle["text/html"]


def test_magic_chip_flag_reaches_the_memory_tab():
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    sh = InteractiveShell.instance()
    try:
        sh.run_cell("%load_ext pallaslab", store_history=False)
        cell = ("%%pallas --chip v6e --tab memory\n"
                "from kernels import matmul, rand\n"
                "matmul(rand((256, 256)), rand((256, 128)), interpret=True)\n")
        with capture_output() as out:
            result = sh.run_cell(cell, store_history=False)
        assert result.success, result.error_in_exec
        text = "\n".join(o.data.get("text/plain", "") for o in out.outputs)
        assert "matmul_kernel on v6e: 448.0 KiB of 32.00 MiB" in text
        assert "on v5e" not in text
    finally:
        InteractiveShell.clear_instance()


# --- GPU: the Triton compile's shared memory, registers, spills and blocks per SM -------------


def gpu_softmax_workbench(**kw):
    from cases.triton_kernels import softmax  # a row softmax in the style of JAX's removed one

    return Workbench(pallaslab.capture(softmax, S((64, 256), jnp.float32)), **kw)


def test_triton_softmax_gpu_section_from_the_real_compile():
    view = gpu_softmax_workbench().memory(gpu=True)
    p = view.payload()
    assert p["chips"] == [] and "targets triton" in p["note"]
    assert p["gpu"]["error"] is None
    rows = p["gpu"]["gpus"]
    assert [(g["gpu"], g["target"]) for g in rows] == [("a100", "gpu-a100"), ("h100", "gpu-h100")]
    for g in rows:
        assert g["error"] is None
        assert g["num_warps"] == 4  # the softmax passes triton CompilerParams(num_warps=4)
        assert g["registers"] > 0 and g["spills"] == 0 and g["shared_bytes"] >= 0
        assert g["blocks_per_sm"] >= 1
        if g["registers"] <= 32:  # then 4 warps per block cap it: 64 warps per SM / 4 = 16
            assert (g["blocks_per_sm"], g["limited_by"], g["warps_per_sm"]) == (16, "warps", 64)
            assert g["occupancy"] == 1.0
    json.dumps(p)
    text = view.to_text()
    a100 = rows[0]
    row = next(line.split() for line in text.splitlines() if line.lstrip().startswith("a100"))
    assert row[:6] == ["a100", f"{a100['shared_bytes']:,}", str(a100["registers"]), "0", "4",
                       str(a100["blocks_per_sm"])]  # the table the HTML shows
    html = view.to_html()
    assert "GPU: shared memory, registers, blocks per SM (Triton)" in html
    assert f'<td>h100</td><td class="num">{rows[1]["shared_bytes"]:,}</td>' in html


def test_gpu_section_is_computed_only_when_asked(monkeypatch):
    from pallaslab import lowering

    def no_compile(*args, **kwargs):
        raise AssertionError("the default Memory view must not compile")

    monkeypatch.setattr(lowering, "lower", no_compile)
    view = gpu_softmax_workbench().memory()
    p = view.payload()
    assert p["gpu"] is None and "wb.memory(gpu=True)" in p["note"]
    assert "GPU" not in view.to_html() and "Triton compile:" not in view.to_text()
    with pytest.raises(AssertionError, match="must not compile"):
        gpu_softmax_workbench().memory(gpu=True).payload()


def test_workbench_gpu_option_reaches_the_memory_tab(monkeypatch):
    from pallaslab import lowering

    calls = []
    real = lowering.lower

    def counting(*args, **kwargs):
        calls.append(kwargs["target"])
        return real(*args, **kwargs)

    monkeypatch.setattr(lowering, "lower", counting)
    view = gpu_softmax_workbench(options={"gpu": True}).memory()
    assert [g["gpu"] for g in view.payload()["gpu"]["gpus"]] == ["a100", "h100"]
    view.to_text(), view.to_html()
    assert calls == ["gpu-a100", "gpu-h100"]  # compiled once per GPU, then kept


def test_missing_triton_shows_the_install_message(monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("PALLASLAB_CACHE_DIR", str(tmp_path))  # no cached compile to fall back on
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    view = gpu_softmax_workbench().memory(gpu=True)
    section = view.payload()["gpu"]
    assert section["gpus"] == []
    assert "needs the Python package 'triton'" in section["error"]
    assert 'pip install "pallaslab[gpu]"' in section["error"]
    assert 'pip install &quot;pallaslab[gpu]&quot;' in view.to_html()
    assert "needs the Python package 'triton'" in view.to_text()


def test_what_if_zero_grid_axis_is_an_error_row_naming_candidate_and_rule():
    # 4096 // 8192 = 0: a grid axis of zero launches nothing; it must not rank as "best"
    candidates = [(8192, 128, 128), (128, 128, 128)]
    view = workbench("matmul_f32").memory(what_if=(make_matmul, candidates))
    w = view.payload()["what_if"]
    assert [r["block_sizes"] for r in w["rows"]] == ["(128, 128, 128)", "(8192, 128, 128)"]
    bad = w["rows"][1]
    assert bad["fits"] is False and bad["chips"] == []
    assert "(8192, 128, 128)" in bad["error"] and "(0, 32, 32)" in bad["error"]
    assert "grid axis 0 is zero" in bad["error"] and "at least 1" in bad["error"]
    assert w["best"] == 0
    assert "grid axis 0 is zero" in view.to_text() and "grid axis 0 is zero" in view.to_html()


def test_what_if_analysis_failure_is_an_error_row(monkeypatch):
    import pallaslab.analysis.whatif as whatif

    def broken(*a, **kw):
        raise IndexError("index 0 is out of bounds for axis 0 with size 0")

    monkeypatch.setattr(whatif, "tile", broken)
    view = workbench("matmul_f32").memory(what_if=(make_matmul, [(128, 128, 128)]))
    row = view.payload()["what_if"]["rows"][0]
    assert "(128, 128, 128)" in row["error"] and "IndexError" in row["error"]


def test_a_narrow_block_shows_why_it_takes_no_scoped_vmem():

    from pallaslab.analysis.occupancy import occupancy
    from pallaslab.views.memory_payload import memory_payload

    fn, args = CATALOG["narrow_row_stats"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    occ = occupancy(kernel, "v5e")
    out = occ.operand("outputs")
    assert (out.buffers, out.buffer_bytes, out.bytes, out.scoped) == (2, 32 * 1024, 0, False)
    assert occ.bytes == 2 * 64 * 256 * 4  # the (64, 256) f32 input's two buffers only
    payload = memory_payload(kernel, [occ])
    (row,) = [o for o in payload["chips"][0]["operands"] if o["origin"] == "outputs"]
    assert row["label"].endswith("(outside scoped VMEM: narrower than 128 lanes)")
    assert row["bytes"] == 0 and row["padding_bytes"] == 0
