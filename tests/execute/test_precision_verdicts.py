"""Precision is not taken for a bug (issue 38 item 5): a kernel whose matrix products are in
bfloat16 feeding a float32 output is judged at bfloat16's tolerance, said in one note, and a
cause is named only when it explains the wrong elements (a read of unwritten scratch that a
select discards is not one). Cases for the CLI: `tests/execute/test_precision_verdicts.py:NAME`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.cli import main

pytestmark = pytest.mark.filterwarnings("error::UserWarning:pallaslab")

F32, BF16 = jnp.float32, jnp.bfloat16
B = 128


def _select_init_body(x_ref, y_ref, o_ref, acc_ref, *, compute=BF16):
    k = pl.program_id(2)
    prod = jnp.dot(x_ref[...].astype(compute), y_ref[...].astype(compute),
                   preferred_element_type=F32)
    acc_ref[...] = jnp.where(k == 0, 0.0, acc_ref[...]) + prod  # the read the select discards

    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...]


def _no_init_body(x_ref, y_ref, o_ref, acc_ref):
    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=F32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...]


def _matmul(x, y, *, body):
    (m, kk), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct((m, n), F32), grid=(m // B, n // B, kk // B),
        in_specs=[pl.BlockSpec((B, B), lambda i, j, k: (i, k)),
                  pl.BlockSpec((B, B), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((B, B), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((B, B), F32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")))(x, y)


def _args():
    return (jax.random.normal(jax.random.key(0), (256, 384), F32),
            jax.random.normal(jax.random.key(1), (384, 256), F32))


def reference(x, y):
    return x @ y


def bf16_matmul():
    """Products in bfloat16, accumulated in float32 scratch set by a select on k == 0."""
    return functools.partial(_matmul, body=_select_init_body), _args()


def f32_matmul():
    """The same kernel computing in float32."""
    return functools.partial(_matmul, body=functools.partial(_select_init_body, compute=F32)), \
        _args()


def no_init_matmul():
    """A float32 accumulator never zeroed: its unwritten value reaches the output."""
    return functools.partial(_matmul, body=_no_init_body), _args()


def _compare(case, **kw):
    fn, args = case()
    return pallaslab.compare(fn, *args, executors="interpret,reference", reference=reference,
                             **kw)


def _precision_notes(c):
    return [n for n in c.notes if "tolerance of bfloat16" in n]


def test_bf16_products_feeding_a_f32_output_are_judged_at_bf16_tolerance():
    c = _compare(bf16_matmul)
    assert c.allclose and c.outcome == "pass", c.verdict
    pair = c.outputs[0].pairs[0]
    assert pair.rtol == pytest.approx(1.6e-2)
    [note] = _precision_notes(c)
    assert note.startswith("outputs: tolerance of bfloat16 (rtol 1.6e-02")
    assert "matrix products in bfloat16" in note
    assert "test_precision_verdicts.py:" in note  # the line of the dot


def test_a_f32_kernel_keeps_the_f32_tolerance():
    c = _compare(f32_matmul)
    assert c.outcome == "pass", c.verdict
    assert c.outputs[0].pairs[0].rtol == pytest.approx(1e-5)
    assert not _precision_notes(c)


def test_an_explicit_rtol_wins_and_a_discarded_read_is_no_cause():
    c = _compare(bf16_matmul, rtol=1e-6)
    assert c.outcome == "mismatch"
    assert c.outputs[0].pairs[0].rtol == 1e-6
    assert not _precision_notes(c)
    kinds = [cause.kind for cause in c.outputs[0].causes]
    assert "first-visit" not in kinds, [cause.message for cause in c.outputs[0].causes]
    assert not any("before any program wrote it" in cause.message
                   for cause in c.outputs[0].causes)


def test_an_unwritten_read_that_reaches_the_output_is_still_the_cause():
    c = _compare(no_init_matmul)
    assert c.outcome == "mismatch"
    cause = next(cause for cause in c.outputs[0].causes if cause.kind == "first-visit")
    assert cause.operand == "scratch[0] (acc_ref)"
    assert "before any program wrote it" in cause.message


def test_the_cli_says_the_tolerance_follows_bfloat16(capsys):
    code = main(["compare", "tests/execute/test_precision_verdicts.py:bf16_matmul",
                 "--executors", "interpret,reference", "--reference",
                 "tests/execute/test_precision_verdicts.py:reference"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tolerance of bfloat16" in " ".join(out.split())
