"""Views: pure payloads, static HTML, text, escaping; the tab registry."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernels import CATALOG, add_kernel, elementwise_2d

import pallaslab
from pallaslab.analysis.inspection import inspect_kernel
from pallaslab.views import registry
from pallaslab.views.grid import affine_fit, grid_payload, payload_nbytes
from pallaslab.views.report import encode_buffers

EVIL = '<img src=x onerror="alert(1)">&</script>'


def tiled_cases():
    names = []
    for name, entry in CATALOG.items():
        if "mesh" in entry.tags or "no-grid" in entry.tags:
            continue
        names.append(name)
    return names


def decode(payload, o, d):
    """What the widget computes for one column of block indices (mirrors grid.js)."""
    col = payload["operands"][o]["index"][d]
    if col["table"] is not None:
        return np.frombuffer(payload["tables"][col["table"]], "<i4")
    grid = payload["grid"]
    ids = np.indices(grid).reshape(len(grid), -1).T if grid else np.zeros((1, 0), int)
    b, *a = col["affine"]
    return b + ids @ np.asarray(a, np.int64) if grid else np.full(1, b)


@pytest.mark.parametrize("name", tiled_cases())
def test_payload_reproduces_every_block_index_table(name):
    fn, args = CATALOG[name].case()[:2]
    for kernel in pallaslab.capture(fn, *args):
        insp = inspect_kernel(kernel)
        if insp.tiling is None:
            continue
        payload = grid_payload(kernel, insp.tiling, insp.findings)
        json.dumps(encode_buffers(payload))  # JSON-able once buffers are encoded
        for o, ot in enumerate(insp.tiling.operands.values()):
            assert payload["operands"][o]["origin"] == ot.origin
            for d in range(ot.block_indices.shape[1]):
                np.testing.assert_array_equal(decode(payload, o, d), ot.block_indices[:, d])
            starts = ot.block_indices * np.asarray(payload["operands"][o]["scale"]) - \
                np.asarray(payload["operands"][o]["offset"])
            np.testing.assert_array_equal(starts, ot.starts)


def test_affine_columns_are_sent_as_coefficients_others_as_int32_buffers():
    fn, args = CATALOG["scalar_prefetch_gather"].case()[:2]
    k = pallaslab.capture(fn, *args)[0]
    insp = inspect_kernel(k)
    p = grid_payload(k, insp.tiling, insp.findings)
    gathered = p["operands"][0]
    assert gathered["origin"] == "args[1]"
    assert gathered["index"][0] == {"affine": None, "table": 0}  # idx_ref[i]: data-dependent
    assert gathered["index"][1] == {"affine": [0, 0], "table": None}
    assert np.frombuffer(p["tables"][0], "<i4").tolist() == [3, 1, 2, 0, 3, 3]
    assert p["operands"][1]["index"][0] == {"affine": [0, 1], "table": None}  # lambda i: (i, 0)


def test_affine_fit():
    grid = (3, 4)
    ids = np.indices(grid).reshape(2, -1).T.astype(np.int64)
    assert affine_fit((5 + 2 * ids[:, 0] - ids[:, 1]).astype(np.int32), ids, grid) == [5, 2, -1]
    assert affine_fit((ids[:, 1] % 2).astype(np.int32), ids, grid) is None
    assert affine_fit(np.zeros(1, np.int32), np.zeros((1, 0), np.int64), ()) == [0]


def test_identical_tables_are_sent_once():
    def fn(idx, x):
        spec = pl.BlockSpec((8, 128), lambda i, idx_ref: (idx_ref[i], 0))
        from jax.experimental.pallas import tpu as pltpu
        return pl.pallas_call(
            lambda i_ref, x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(4,),
                                                   in_specs=[spec], out_specs=spec))(idx, x)

    k = pallaslab.capture(fn, jnp.array([1, 0, 3, 2], jnp.int32), jnp.zeros((32, 128)))[0]
    insp = inspect_kernel(k)
    p = grid_payload(k, insp.tiling, insp.findings)
    assert len(p["tables"]) == 1
    assert [op["index"][0]["table"] for op in p["operands"]] == [0, 0]


def test_million_program_grid_payload_is_small():
    x = jax.ShapeDtypeStruct((1024 * 8, 1024 * 128), jnp.float32)
    wb = pallaslab.inspect(lambda a, b: elementwise_2d(a, b, block=(8, 128)), x, x)
    p = wb.grid().payload()
    assert p["programs"] == 1 << 20
    assert p["tables"] == []
    assert payload_nbytes(p) < 8 << 20


def test_findings_are_located_on_programs_and_blocks():
    fn, args = CATALOG["racy_parallel_accumulate"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    p = wb.grid().payload()
    race = next(f for f in p["findings"] if f["code"] == "parallel-write-conflict")
    assert race["operand"] == "outputs"
    assert race["blocks"] == [[0, 0]]
    assert race["steps"] == [prog[0] for prog in race["programs"]]
    assert len(race["steps"]) >= 2


def test_grid_text_and_html():
    fn, args = CATALOG["matmul_f32"].case()[:2]
    view = pallaslab.inspect(fn, *args).grid()
    text = view.to_text()
    assert "Grid of kernel 0 matmul_kernel: 4 x 3 x 2 = 24 programs" in text
    # one row per operand: its array, block, memory space, index map's line, fetches, revisits
    row = next(line.split() for line in text.splitlines() if "o_ref (outputs)" in line)
    assert row[2:] == ["output", "float32[512,", "384]", "(128,", "128)", "default",
                       "kernels.py:88", "12", "12", "786,432"]
    html = view.to_html()
    assert "<svg" in html and "matmul_kernel" in html
    assert "<script" not in html  # static HTML runs nowhere
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == text
    assert "<style>" in bundle["text/html"]


def evil_kernel():
    def fn(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              name=EVIL, grid=(2,), in_specs=[spec, spec], out_specs=spec)(x, x)

    return fn, (jax.ShapeDtypeStruct((16, 128), jnp.float32),)


def test_user_strings_are_escaped_in_every_static_rendering():
    fn, args = evil_kernel()
    wb = pallaslab.inspect(fn, *args)
    assert wb.kernels[0].name == EVIL
    for html in (wb.grid().to_html(), wb.overview().to_html(), wb.to_html(),
                 wb._repr_mimebundle_()["text/html"]):
        assert EVIL not in html
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&lt;/script&gt;" in html
    report = wb.report()
    assert EVIL not in report
    assert report.count("</script>") == 2  # the data block and the host module, nothing else


def test_registry_adds_a_tab_without_touching_existing_views():
    from pallaslab.views.base import View

    class Echo(View):
        name = "echo"
        module = "overview.js"

        def __init__(self, ctx):
            self.ctx = ctx

        def payload(self):
            return {"kernel": {"name": self.ctx.kernel.name}}

        def to_text(self):
            return f"echo {self.ctx.kernel.name}"

        def to_html(self):
            return "<p>echo</p>"

    registry.register_tab("echo", order=99, build=Echo,
                          available=lambda ctx: ctx.kernel.name == "matmul_kernel")
    try:
        fn, args = CATALOG["two_kernels"].case()[:2]
        wb = pallaslab.inspect(fn, *args)
        names0 = [t.name for t in wb.tabs(0)]
        assert names0[:2] == ["overview", "grid"] and names0[-1] == "echo"
        assert "echo" not in [t.name for t in wb.tabs(1)]
        assert wb.echo().to_text() == "echo matmul_kernel"
        assert "echo matmul_kernel" in wb.to_text()
    finally:
        registry.unregister_tab("echo")
    with pytest.raises(ValueError, match="lower-case identifier"):
        registry.register_tab("Bad Name", order=1, build=Echo)


def test_mesh_kernels_get_an_overview_but_no_grid():
    fn, args = CATALOG["gpu_mesh_kernel"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    names = [t.name for t in wb.tabs()]
    assert names[0] == "overview" and "grid" not in names
    with pytest.raises(pallaslab.PallasLabError, match="Grid view is not available for kernel"):
        wb.grid()
    assert "mesh kernels" in wb.overview().to_html()


def test_a_failing_view_does_not_lose_the_report():
    from pallaslab.errors import UnavailableError
    from pallaslab.views.base import View

    class Broken(View):
        name = "broken"
        module = "overview.js"

        def __init__(self, ctx):
            self.ctx = ctx

        def payload(self):
            raise UnavailableError(f"needs a TPU attached {EVIL}")

    registry.register_tab("broken", order=98, build=Broken)
    try:
        fn, args = CATALOG["matmul_f32"].case()[:2]
        report = pallaslab.inspect(fn, *args).report()
    finally:
        registry.unregister_tab("broken")
    assert "needs a TPU attached" in report and EVIL not in report
    assert "grid.js" in report  # the other views are still there


def test_the_package_ships_the_widget_modules():
    from importlib.resources import files

    static = files("pallaslab.views") / "static"
    for name in ("grid.js", "overview.js", "host.js", "pallaslab.css"):
        text = (static / name).read_text()
        assert "</script" not in text.lower()  # safe to inline in the report
        if name.endswith(".js"):
            assert text.startswith("// @ts-check")


VIEW_MODULES = ("grid.js", "overview.js", "memory.js", "pipeline.js", "lowering.js",
                "compare.js", "step.js", "host.js")


@pytest.mark.parametrize("name", VIEW_MODULES)
def test_each_module_is_assembled_into_one_valid_es_module(name, tmp_path):
    """anywidget loads one string per module: the prelude (and grid's parts) are inlined in
    place of their imports, once, without their exports; node parses the result as a module
    (a name declared twice would be a SyntaxError)."""
    import re
    import shutil
    import subprocess

    from pallaslab.views.base import module_source

    text = module_source(name)
    assert not re.search(r'^\s*(import|export)\b[^;]*\bfrom\s*"', text, re.MULTILINE)
    assert text.count("export function h(") == 0 and text.count("function h(") == 1
    assert "</script" not in text.lower()
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    path = tmp_path / f"{name}.mjs"
    path.write_text(text)
    run = subprocess.run([node, "--check", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_the_prelude_helpers_are_defined_once_in_the_sources():
    """The DOM/format/colour helpers live in prelude.js only."""
    from pallaslab.views.base import STATIC

    for f in STATIC.glob("*.js"):
        if f.name == "prelude.js":
            continue
        text = f.read_text()
        for helper in ("function h(", "const tuple =", "function rgb(", "function themeColors(",
                       "function mix(", "const num =", "function typed(", "function toInt32("):
            assert helper not in text, (f.name, helper)


def test_outputs_are_copied_at_their_write_back_not_at_the_first_visit():
    """Issue 10 item 10: the static program map counts an output's copy at the last step of
    its run (the matmul's last k), and only outputs named by a parallel-write-conflict
    finding get writer axes (separate writers even in consecutive steps)."""
    from pallaslab.analysis.findings import write_back_mask

    fn, args = CATALOG["matmul_f32"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    tiling = wb.context(0).tiling
    out = tiling.operands["outputs"]
    assert write_back_mask(out).tolist() == [k == 1 for *_, k in
                                             (tiling.program_at(s) for s in range(24))]
    assert write_back_mask(tiling.operands["args[0]"]) is tiling.operands["args[0]"].fetch_mask
    html = wb.grid().to_html()
    assert "program (0, 0, 0): step 0, 2 copies" in html
    assert "program (0, 0, 1): step 1, 3 copies" in html
    assert {o["origin"]: o["writer_axes"] for o in wb.grid().payload()["operands"]} == {
        "args[0]": [], "args[1]": [], "outputs": []}
    fn, args = CATALOG["racy_parallel_accumulate"].case()[:2]
    racy = pallaslab.inspect(fn, *args).grid().payload()
    assert {o["origin"]: o["writer_axes"] for o in racy["operands"]} == {
        "args[0]": [], "outputs": [0]}
