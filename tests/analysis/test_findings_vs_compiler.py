"""Findings that claim the TPU compiler rejects a kernel, against the real compiler.

For every kernel below and each chip, the analysis's error findings among REJECTING (raised
before any lowering) must name exactly the failures libtpu reports when `pallaslab.lower(...,
compile=True)` runs it: an error finding <=> the compile fails, for the same rule. One compile
per (kernel, chip), shared by the module's tests.
"""

from __future__ import annotations

import importlib.util

import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.findings import find
from pallaslab.analysis.vmem_findings import vmem_findings

CHIPS = ("v5e", "v6e")
# Finding code -> the lowering diagnostic code the compiler's refusal is reported as.
REJECTING = {
    "tpu-block-shape": "tpu-block-shape",
    "tpu-buffer-count": "tpu-buffer-count",
    "tpu-mixed-element": "tpu-mixed-element",
    "vmem-overflow": "vmem-oom",
    "no-sparse-core": "unsupported-target",
}
# The kernels whose findings claim a rejection, every advanced TPU kernel, and kernels whose
# findings are about run time (the compiler must accept them).
KERNELS = sorted(
    {n for n, e in CATALOG.items() if e.findings & set(REJECTING)}
    | {n for n, e in CATALOG.items() if "tpu-advanced" in e.tags}
    | {"vector_add", "matmul_f32", "scalar_prefetch_gather", "squeezed_dims", "partial_blocks",
       "out_of_bounds_block", "uncovered_output"})
# (kernel, chip) the compiler refuses for a reason no finding is about, and the diagnostic.
OTHER_REFUSALS: dict[tuple[str, str], str] = {}
# (kernel, chip) where the analysis and libtpu disagree, and why (measured with libtpu 0.0.52).
KNOWN_DISAGREEMENTS = {
    ("vmem_overflow", "v6e"): "the kernel stores its whole scratch and loads it straight back; "
    "libtpu forwards the store and allocates no scratch, so it needs 32 MiB (the 4 pipeline "
    "buffers), not the 40 MiB counted, and v6e's 32 MiB default limit holds it. With the "
    "scratch really used (acc += x) it needs more than 40 MiB.",
}


def predicted(kernel, chip: str) -> set[str]:
    """The lowering codes the analysis's error findings foresee for one kernel on `chip`."""
    found = (*find(kernel, None), *vmem_findings(kernel, (chip,)))
    return {REJECTING[f.code] for f in found if f.code in REJECTING and f.severity == "error"}


@pytest.fixture(scope="module")
def verdicts():
    """(kernel name, chip) -> (predicted codes, [(compiled ok, error diagnostic codes)])."""
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    out = {}
    for name in KERNELS:
        fn, args = CATALOG[name].case()
        cap = pallaslab.capture(fn, *args)
        for chip in CHIPS:
            result = pallaslab.lower(cap, target=f"tpu-{chip}", compile=True)
            compiled = [(k.ok, {d.code for d in k.diagnostics if d.severity == "error"})
                        for k in result.kernels]
            out[name, chip] = (set().union(*(predicted(k, chip) for k in cap)), compiled)
    return out


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("name", KERNELS)
def test_error_finding_iff_compile_fails(verdicts, name, chip):
    foreseen, compiled = verdicts[name, chip]
    refused = set().union(*(codes for ok, codes in compiled if not ok))
    report = f"{name} on {chip}: findings foresee {sorted(foreseen)}, libtpu: {compiled}"
    if (name, chip) in KNOWN_DISAGREEMENTS:
        assert all(ok for ok, _ in compiled) == bool(foreseen), f"disagreement gone? {report}"
        return
    if (name, chip) in OTHER_REFUSALS:
        assert refused == {OTHER_REFUSALS[name, chip]} and not foreseen, report
        return
    assert all(ok for ok, _ in compiled) == (not foreseen), report
    assert refused == foreseen, report


@pytest.mark.tpu_compiler
def test_every_rejecting_code_is_exercised(verdicts):
    # Each rule is checked on at least one kernel the compiler does refuse.
    seen = set().union(*(foreseen for foreseen, _ in verdicts.values()))
    assert seen == set(REJECTING.values())


def _doubling(rows: int, limit: int):
    """A grid of 2 over (rows, 128) f32 blocks (4 pipeline buffers) under `vmem_limit_bytes`."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def fn(x):
        return pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((rows, 128), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((rows, 128), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=limit))(x)

    return pallaslab.capture(fn, jax.ShapeDtypeStruct((2 * rows, 128), jnp.float32))


@pytest.mark.tpu_compiler
@pytest.mark.parametrize(("rows", "compiles"), [(32736, True), (32744, False)])
def test_a_limit_above_the_chips_vmem_is_capped_at_it(rows, compiles):
    # vmem_limit_bytes=100 MiB on 7x (64 MiB of VMEM): libtpu caps the limit at the VMEM less
    # the 64 KiB it keeps (chips.VMEM_RESERVED), so 4 buffers of 32736 f32 rows x 128 (64 MiB -
    # 64 KiB) compile and 16 KiB more do not -- and the findings say the same.
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    cap = _doubling(rows, 100 << 20)
    (result,) = pallaslab.lower(cap, target="tpu-7x", compile=True).kernels
    codes = [(f.code, f.severity) for f in vmem_findings(cap[0], ("7x",))]
    assert result.ok == compiles, [d.message for d in result.diagnostics]
    assert codes == ([("vmem-limit-above-chip", "info")] if compiles
                     else [("vmem-overflow", "error")])
