"""The Memory view's tables say what is true per chip (issue 39, item 5): the what-if verdict
names the chips a block size does not fit, and the bar's default scale is the chip's VMEM."""

import functools

import jax
import jax.numpy as jnp
from kernels import matmul

import pallaslab
from pallaslab.views.memory_tree import bar_scale

MiB = 1 << 20
F32 = jax.ShapeDtypeStruct((4096, 4096), jnp.float32)  # tutorial 02's matmul


def _make(block):
    return functools.partial(matmul, bm=block, bk=block, bn=block), (F32, F32)


def test_the_what_if_verdict_names_the_chips_a_block_does_not_fit():
    view = pallaslab.inspect(_make(128)[0], F32, F32).memory(what_if=(_make, [512, 1024, 2048]))
    rows = {r["block_sizes"]: r for r in view.payload()["what_if"]["rows"]}
    # 1024: 28 MiB of buffers + the 4 MiB f32 dot result = 32 MiB, over v5e's 16, v6e's 32
    assert [(c["chip"], c["need_bytes"], c["fits"]) for c in rows["1024"]["chips"]] == [
        ("v5e", 32 * MiB, False), ("v6e", 32 * MiB, True)]
    html = view.to_html()
    assert "<td>does not fit v5e</td>" in html
    assert "<td>fits no chip</td>" in html  # 2048: 112 MiB of buffers
    assert "<td>does not fit</td>" not in html


def test_the_bar_is_the_chips_vmem_and_says_so():
    view = pallaslab.inspect(_make(128)[0], F32, F32).memory()  # 448 KiB: 0.3% of 128 MiB
    chips = view.payload()["chips"]
    assert bar_scale(chips) == 128 * MiB
    html = view.to_html()
    assert "bar = 128.00 MiB (the chip's VMEM)" in html
    assert 'style="width:0.098%"' in html  # one 64 KiB f32 block buffer x2 = 128 KiB of 128 MiB


def test_tutorial_02s_prose_says_the_tables_figure():
    import json
    import pathlib

    nb = json.loads((pathlib.Path(__file__).parents[2] / "notebooks"
                     / "02_debugging_a_kernel.ipynb").read_text())
    prose = " ".join("".join(c["source"]).replace("\n", " ") for c in nb["cells"]
                     if c["cell_type"] == "markdown")
    row = pallaslab.inspect(_make(128)[0], F32, F32).memory(what_if=(_make, [1024])).table
    need = row.rows[0].chip("v5e").need_bytes // MiB
    assert f"1024 needs {need} MiB (28 MiB of buffers" in prose and need == 32
