"""The what-if table's VMEM verdicts: the VMEM findings' rule, and libtpu's word.

A candidate fits a chip when its buffers plus the matrix product its body materialises fit the
scoped-VMEM limit (`Occupancy.need_bytes`), the rule `vmem-overflow` / `vmem-spill-risk` apply.
Tutorial 03's bf16 2048^2 matmul with 1024 blocks has 16 MiB of buffers, exactly v5e's default
limit; libtpu 0.0.52 refuses it, needing 18.36 MiB (its 4 MiB f32 dot result sits beside
them). The compiler tests compile each candidate once per chip (cached on disk).
"""

from __future__ import annotations

import functools
import importlib.util
import math

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.occupancy import occupancy
from pallaslab.analysis.vmem_findings import vmem_findings
from pallaslab.analysis.whatif import CompilerVerdict, what_if
from pallaslab.views.memory import libtpu_verdict, what_if_table_html
from pallaslab.views.memory_payload import what_if_payload

MiB = 1 << 20
A = jax.ShapeDtypeStruct((2048, 2048), jnp.bfloat16)
CHIPS = ("v5e", "v6e")


def mm_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x, y, *, block):
    (m, k), (_, n) = x.shape, y.shape
    return pl.pallas_call(
        mm_kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // block, n // block, k // block),
        in_specs=[pl.BlockSpec((block, block), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((block, block), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(x, y)


def make(block):
    return functools.partial(matmul, block=block), (A, A)


def test_the_1024_block_matmul_does_not_fit_v5e_its_dot_result_beside_the_buffers():
    row = what_if(make, [1024], CHIPS).rows[0]
    v5e, v6e = row.chip("v5e"), row.chip("v6e")
    assert v5e.vmem_bytes == 16 * MiB == v5e.limit  # the buffers alone fit, exactly
    assert v5e.body_bytes == 4 * MiB  # the f32[1024, 1024] dot result
    assert v5e.need_bytes == 20 * MiB and not v5e.fits
    assert v6e.fits and not row.fits and row.compiles is None


@pytest.mark.parametrize("block", [128, 256, 512, 1024, 2048])
def test_what_if_and_the_vmem_findings_share_one_rule(block):
    fn, args = make(block)
    kernel = pallaslab.capture(fn, *args)[0]
    row = what_if(make, [block], CHIPS).rows[0]
    for chip in CHIPS:
        flagged = {f.code for f in vmem_findings(kernel, (chip,))}
        occ = occupancy(kernel, chip)
        verdict = row.chip(chip)
        assert verdict.need_bytes == occ.need_bytes
        assert verdict.fits == (not flagged & {"vmem-overflow", "vmem-spill-risk"}), (chip, flagged)


def fake_compiler(refused: set[tuple[int, str]]):
    """A compiler that refuses (block, chip) pairs: the kernel's block is its first operand's."""
    def verdict(cap, index, chip):
        block = cap[index].operands[0].block_dims[0].size
        if (block, chip) in refused:
            return CompilerVerdict(False, 3 * MiB, "vmem-oom")
        return CompilerVerdict(True)
    return verdict


def test_the_compilers_verdict_ranks_and_is_shown_beside_the_estimate():
    table = what_if(make, [128, 256, 512], ("v5e",), compiler=fake_compiler({(512, "v5e")}))
    by_block = {r.block_sizes: r for r in table.rows}
    assert by_block[512].fits and by_block[512].compiles is False  # estimate yes, compiler no
    assert table.rows[-1].block_sizes == 512 and table.best is not None
    assert table.best.compiles is True
    text = str(table)
    assert "v5e libtpu" in text and "no (3.00 MiB)" in text and "ok" in text
    html = what_if_table_html(what_if_payload(table))
    assert "libtpu refuses it" in html and "v5e libtpu" in html


def test_without_a_compile_the_table_has_no_compiler_column():
    table = what_if(make, [256, 1024], ("v5e",))
    assert not table.compiled and "libtpu" not in str(table)
    assert "1024+256" in str(table) and "16384+4096 !!" in str(table)  # buffers+body KiB
    payload = what_if_payload(table)
    assert all(r["compiles"] is None for r in payload["rows"])
    assert "libtpu" not in what_if_table_html(payload)


# --- against libtpu ------------------------------------------------------------------------

COMPILED = (256, 512, 1024)


@pytest.fixture(scope="module")
def compiled_table():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    return what_if(make, COMPILED, ("v5e",), compiler=libtpu_verdict)


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("block", COMPILED)
def test_the_estimate_agrees_with_libtpu_on_v5e(compiled_table, block):
    row = next(r for r in compiled_table.rows if r.block_sizes == block)
    v5e = row.chip("v5e")
    assert v5e.compiler is not None
    assert v5e.fits == v5e.compiler.compiles, f"{block}: estimate {v5e}, libtpu {v5e.compiler}"


@pytest.mark.tpu_compiler
def test_libtpu_needs_more_than_the_buffers_of_the_1024_blocks_and_at_most_the_estimate(
        compiled_table):
    v5e = next(r for r in compiled_table.rows if r.block_sizes == 1024).chip("v5e")
    assert v5e.compiler is not None and v5e.compiler.error == "vmem-oom"
    need = v5e.compiler.need_bytes
    assert need is not None and v5e.vmem_bytes < need <= v5e.need_bytes  # 18.36 MiB measured
    assert math.isclose(need / MiB, 18.36, abs_tol=0.5)
    assert compiled_table.rows[-1].block_sizes == 1024  # refused: ranked last


@pytest.mark.tpu_compiler
def test_the_memory_view_compiles_the_candidates_when_asked(compiled_table):
    del compiled_table  # the same compiles, from the disk cache
    fn, args = make(512)
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args))
    view = wb.memory(what_if=(make, [512, 1024]), chips="v5e", compile=True)
    rows = {r["block_sizes"]: r for r in view.payload()["what_if"]["rows"]}
    assert rows["512"]["compiles"] is True and rows["1024"]["compiles"] is False
    assert "libtpu refuses it" in view.to_html() and "no (18." in view.to_text()
