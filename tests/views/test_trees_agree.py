"""Each view that builds one tree (`views.parts`) renders its text and static HTML from it: the
text is the tree's text, and every part of the tree is in the HTML, so neither can word a
finding its own way."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from helpers import workbench
from kernels import matmul

from pallaslab.views.parts import Section, to_html, to_text


def assert_renders_its_tree(view) -> Section:
    tree = view.tree()
    assert view.to_text() == to_text(tree)
    html = view.to_html()
    for part in tree.children:
        assert to_html(part) in html, part
    return tree


def _make_matmul(block):
    x = jax.ShapeDtypeStruct((2048, 2048), jnp.float32)
    return functools.partial(matmul, bm=block, bk=block, bn=block), (x, x)


def test_memory_renders_its_tree():
    # over the limit (a spill note per chip) and a what-if with a row that fits no chip
    tree = assert_renders_its_tree(workbench("vmem_overflow").memory())
    assert to_text(tree).count("note: the kernel body computes") == 2
    view = workbench("matmul_f32").memory(what_if=(_make_matmul, [256, 2048]))
    assert "fits no chip" in to_text(assert_renders_its_tree(view))


def test_overview_renders_its_tree():
    tree = assert_renders_its_tree(workbench("racy_parallel_accumulate").overview())
    text = to_text(tree)
    assert text.startswith("Kernel 0: row_sum_kernel  (")
    assert "grid 4 = 4 programs; semantics: parallel; backend:" in text
    assert "error parallel-write-conflict: " in text
    assert "no findings" in to_text(assert_renders_its_tree(workbench("matmul_f32").overview()))


def test_inspect_prints_the_overview_tree(capsys):
    """`pallaslab inspect` prints the Overview's tree: the same heading, facts, operand rows
    and findings, and the terminal's extras (VMEM per chip) before the findings."""
    from pallaslab.cli import main

    view = workbench("matmul_f32").overview()
    assert main(["inspect", "tests/kernels.py:matmul_f32"]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in to_text(view.tree()).splitlines()]
    for line in [*lines[:2], lines[-1]]:  # heading, facts, "no findings"
        assert line in out
    assert out.index("VMEM on tpu-v5e: 448 KiB of 16,384 KiB") < out.index("no findings")
    assert "acc_ref (scratch[0])" in out


def test_devices_renders_its_tree():
    from kernels import CATALOG

    import pallaslab

    fn, args = CATALOG["ring_all_gather"].case()
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args))
    view = wb.view("devices", result=pallaslab.run(fn, *args, devices=4))
    tree = assert_renders_its_tree(view)
    assert "<svg" in to_html(tree) and "semaphores: " in to_text(tree).splitlines()[-1]


def test_pipeline_renders_its_tree():
    # the model's lead line, facts and timeline; a nested pipeline; a manual-DMA kernel's
    # headline and recorded run; a mesh kernel with no BlockSpec pipeline
    tree = assert_renders_its_tree(workbench("vmem_overflow").pipeline(chip="v6e"))
    assert "<svg" in to_html(tree) and to_text(tree).splitlines()[1].endswith(
        tree.children[0].parts[0])
    assert_renders_its_tree(workbench("emit_pipeline_matmul").view("pipeline"))
    manual = assert_renders_its_tree(workbench("manual_dma_double_buffer").view("pipeline"))
    assert "moved by its DMAs 262,144 B in 8 DMAs" in to_text(manual)
    mesh = assert_renders_its_tree(workbench("core_map_kernel").view("pipeline"))
    assert "no BlockSpec pipeline (manual DMAs only)" in to_text(mesh)


def test_lowering_renders_its_tree():
    """One tree per target: the verdict, the diagnostics, the resources and the stages; the
    HTML's stages are the IR excerpts, the text's their names and sizes."""
    tree = assert_renders_its_tree(workbench("tpu_misaligned").lowering())
    assert len(tree.children) == 1  # one target lowered
    text, html = to_text(tree), to_html(tree)
    # "(cached)" follows when an earlier test lowered the same kernel
    assert "(mosaic-tpu): FAILED, not compiled" in text.splitlines()[0]
    assert "error tpu-block-shape [args[0]]: args[0]: block shape (10, 100)" in text
    assert "<code>tpu-block-shape</code>" in html and "block shape (10, 100)" in html
    ok = assert_renders_its_tree(workbench("matmul_f32").lowering())
    assert to_html(ok).count('<details class="pl-stage"') == 2
    assert to_text(ok).splitlines()[-2].strip().startswith("jaxpr (")


def test_lower_prints_the_lowering_tree(capsys):
    """`pallaslab lower` prints the Lowering view's tree: the same heading, diagnostics and
    stage rows."""
    from pallaslab.cli import main

    view = workbench("tpu_misaligned").lowering()
    assert main(["lower", "tests/kernels.py:tpu_misaligned", "--target", "tpu-v5e"]) == 1
    out = [line.strip() for line in capsys.readouterr().out.splitlines()]
    lines = [line.strip() for line in to_text(view.tree()).splitlines()]
    # the heading, with its verdict ("(cached)" where one of the two found the other's result)
    assert lines[0].removesuffix(" (cached)") == out[0].removesuffix(" (cached)")
    for line in lines[2:]:  # resources, stages and each stage's row
        assert line.rstrip(":") in out
    assert lines[1].startswith("error tpu-block-shape [args[0]]: args[0]: block shape")
    assert out[1].startswith(lines[1][:100])


def test_grid_renders_its_tree():
    # the grid, one row per operand (block, memory space, index map's line, fetches, revisits),
    # the maps, the findings and what the first programs touch; a nested pipeline; a mesh kernel
    tree = assert_renders_its_tree(workbench("matmul_f32").grid())
    text, html = to_text(tree), to_html(tree)
    assert text.startswith("Grid of kernel 0 matmul_kernel: 4 x 3 x 2 = 24 programs; semantics: ")
    for fact in ("o_ref (outputs)", "kernels.py:88", "786,432", "Inside the blocks"):
        assert fact in text and fact in html
    assert "<svg" in html and "no findings" in text
    racy = to_text(assert_renders_its_tree(workbench("racy_parallel_accumulate").grid()))
    assert "error parallel-write-conflict: outputs: programs (0,), (1,), (2,)" in racy
    nested = assert_renders_its_tree(workbench("emit_pipeline_matmul").view("grid"))
    assert "x_ref (window of args[0])" in to_text(nested) and "(window of args[0])" in to_html(
        nested)
    mesh = assert_renders_its_tree(workbench("core_map_kernel").view("grid"))
    assert "no BlockSpec grid" in to_text(mesh)


def test_step_renders_its_tree():
    # before any program; then the program the comparison blamed: its blocks as read and as
    # written, its equation and line, the mismatch line and why it cannot go further
    from kernels import CATALOG, shifted_block_reference

    import pallaslab
    from pallaslab.views.compare import attach_comparison

    fn, args = CATALOG["shifted_block_wrong"].case()[:2]
    wb = pallaslab.inspect(fn, *args)
    fresh = to_text(assert_renders_its_tree(wb.step()))
    assert fresh.splitlines()[1].strip().startswith("no program has run yet")
    attach_comparison(wb, executors=("interpret", "reference"), reference=shifted_block_reference)
    view = wb.step().reset().run_to_mismatch().run_to_mismatch()
    tree = assert_renders_its_tree(view)
    text, html = to_text(tree), to_html(tree)
    assert "3/4 programs run, last program (2,) (step 2)" in text
    assert "1 program(s) wrote mismatched blocks: (2,)" in text
    assert "<code>(2,)</code>" in html and "error: no program after step 2" in text
    for fact in ("o_ref (outputs)", "8,192 NaN", "mul b 2.0", "kernels.py:"):
        assert fact in text and fact in html


def test_step_on_devices_renders_its_tree():
    # before a step (nothing runs): the state, why, and one row per device
    view = workbench("ring_all_gather", options={"devices": 4}).step()
    tree = assert_renders_its_tree(view)
    text = to_text(tree)
    assert text.startswith("Step kernel 0 body on 4 devices: not stepped yet")
    assert "note: Not stepped yet." in text
    assert text.count("not started: ") == 4 and to_html(tree).count("not started: ") == 4


def test_every_tab_of_a_workbench_renders_its_tree():
    # Every registered tab a TPU and a GPU kernel offer (Compare and Step before any run
    # included): no view words its text or static HTML outside its one tree.
    import kernels_gpu

    import pallaslab

    fn, args = kernels_gpu.masked_row_softmax()
    benches = [workbench("matmul_f32"), pallaslab.Workbench(pallaslab.capture(fn, *args))]
    seen = set()
    for wb in benches:
        for tab in wb.tabs():
            assert_renders_its_tree(wb.view(tab.name))
            seen.add(tab.name)
    assert {"overview", "grid", "memory", "pipeline", "lowering"} <= seen, seen
