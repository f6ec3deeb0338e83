"""Exercise feedback a learner can use (issue 38, item 8): one bullet per cause, counts that
agree, a list with no hard wraps, operands named as the learner wrote them, suggestions that are
valid Pallas, the block-index sentence for an index map returning element offsets, and races
between mesh cores named by core."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pallaslab.exercises import check
from pallaslab.exercises.solutions import accumulators, grids


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add_vectors_element_offsets(x, y):
    """Wrong: the index map returns element offsets (`i * 256`), not block indices."""
    spec = pl.BlockSpec((256,), lambda i: (i * 256,))
    return pl.pallas_call(_add_kernel, grid=(4,), in_specs=[spec, spec], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x, y)


def _mine(a_ref, b_ref, o_ref):
    o_ref[...] = a_ref[...] + b_ref[...]


def row_bias_named(a, b):
    """Wrong (b follows i): a kernel whose parameters are the learner's own names."""
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
    bias = pl.BlockSpec((1, 128), lambda i, j: (0, i))
    return pl.pallas_call(_mine, grid=(2, 2), in_specs=[spec, bias], out_specs=spec,
                          out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), interpret=True)(a, b)


def _counts(text: str) -> set[tuple[int, int]]:
    return {(int(a.replace(",", "")), int(b.replace(",", "")))
            for a, b in re.findall(r"(\d[\d,]*) of (\d[\d,]*) element", text)}


def test_element_offsets_get_the_block_index_sentence_once():
    result = check("add-vectors", add_vectors_element_offsets)
    assert result.verdict == "wrong"
    text = result.text()
    assert "index maps return block indices, not element offsets" in text, text
    assert sum("outside the array" in d for d in result.diagnosis) <= 1, text
    assert len(result.diagnosis) == len(set(result.diagnosis)), text
    assert len(_counts(text)) == 1, text  # one unwritten count, not 512 and 768


def test_unwritten_counts_agree():
    result = check("add-vectors", grids.add_vectors_half_grid)
    text = result.text()
    assert _counts(text) == {(512, 1024)}, text
    assert sum("no program wrote" in d or "never written" in d
               for d in result.diagnosis) == 1, text


def test_missing_init_suggests_valid_pallas():
    for name, fn in (("matmul-accumulate", accumulators.matmul_accumulate_no_init),
                     ("matmul-scratch", accumulators.matmul_scratch_no_init)):
        text = check(name, fn).text()
        assert "program_id(k)" not in text and "pl.when(k == 0)" not in text, text
        assert "pl.when(pl.program_id(2) == 0)" in text, text


def test_operands_named_as_the_learner_wrote_them():
    result = check("row-bias", row_bias_named)
    text = result.text()
    assert result.verdict == "wrong"
    assert "args[" not in text and "outputs (" not in text, text
    assert "b_ref" in text, text


def test_feedback_is_a_list_without_hard_wraps():
    result = check("add-vectors", add_vectors_element_offsets)
    assert result.diagnosis and all("\n" not in d for d in result.diagnosis)
    html = result._repr_html_()
    assert html.count("<li>") == len(result.diagnosis), html
    assert "<ul" in html and "<pre" not in html
    lines = result.text().splitlines()
    assert len(lines) == 1 + len(result.diagnosis)  # one line per bullet


def test_race_between_mesh_cores_is_named_by_core():
    from jax.experimental.pallas import tpu as pltpu

    from pallaslab.execute.executors.diagnostics import _race_finding
    from pallaslab.model import capture

    def body(x_hbm, o_hbm, vbuf, sem):
        pltpu.async_copy(x_hbm.at[pl.ds(0, 8)], vbuf, sem).wait()
        pltpu.async_copy(vbuf, o_hbm.at[pl.ds(0, 8)], sem).wait()

    def fn(x):
        mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct((8, 128), x.dtype), mesh=mesh,
                         scratch_types=[pltpu.VMEM((8, 128), jnp.float32),
                                        pltpu.SemaphoreType.DMA])(x)

    kernel = capture(fn, jnp.zeros((16, 128), jnp.float32)).kernels[0]
    assert kernel.kind == "mesh"
    message = ("RACE DETECTED\n  write of ('vmem', 7, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))]"
               " from (0, 1), /k.py:10:4 (body)\n  previous access:\n  write of "
               "('vmem', 7, 0, 0)[(slice(0, 8, 1), slice(0, 128, 1))] from (0, 0), "
               "/k.py:10:4 (body)")
    finding = _race_finding(message, kernel, (0,), (0,))
    assert "between programs (0,) and (0,)" not in finding.message, finding.message
    assert "between core 1 and core 0" in finding.message, finding.message
