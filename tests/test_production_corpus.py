"""tokamax's production kernels (tests/production.py), captured, checked against the real
compilers on a CPU host (issue 16): capture, grids and block shapes, VMEM within 5% of
libtpu's bisected need, Triton compiled to SASS with its resources, stepping equations."""

from __future__ import annotations

import pytest

pytest.importorskip("tokamax", reason="tokamax is in the test extra (pip install -e .[test])")

from production import CORPUS, tokamax_on_cpu

import pallaslab
from pallaslab.analysis.occupancy import occupancy

TOLERANCE = 0.05

# name -> [(kernel, kind, backend, grid, {operand: block shape})]: read from each kernel's code
# (tokamax 0.0.17) at the corpus shapes, not from our own output.
EXPECTED = {
    # splash attention forward: (batch 2, heads 4, 512/128 q blocks x 512/128 kv blocks)
    "tpu_flash_attention": [("splash_mha_fwd_no_residuals", "tpu", (2, 4, 16),
                             {"outputs[0]": (None, 1, 128, 128)})],
    # Triton flash attention: (256 / block_q 64 queries, batch 1 x 2 heads)
    "triton_flash_attention_f16": [("pallas_flash_attention", "triton", (2, 4),
                                    {"args[2]": (64, None, 64), "args[3]": (256, None, 64)})],
    "triton_flash_attention_f32": [("pallas_flash_attention", "triton", (2, 4),
                                    {"outputs[0]": (64, None, 64)})],
    # gmm: operands stay in HBM (memory_space ANY), the kernel pipelines them itself
    "ragged_dot_gmm": [("pallas_tpu_ragged_dot_gmm", "tpu", (), {"args[3]": (512, 256)})],
    # one program over 64 tokens x 256 experts, top-8 values and indices out
    "router_topk": [("_select_kernel", None, (1,), {"args[0]": (64, 256),
                                                    "outputs[0]": (64, 8)})],
    "deepseek_rope": [("rope", "tpu", (), {"args[1]": (4096, 512)})],
    "grouped_lowrank_proj": [
        ("wo_a_projection_gather_cos_sin", "tpu", (), {}),
        ("wo_a_projection", "tpu", (16, 1, 1), {"args[1]": (4096, 1024),
                                                "outputs": (128, 1024)}),
    ],
}

# (case, kernel) -> why the estimate may stay more than 5% under the compiler: the body loads
# a whole f8[4096, 1024] weight block as one value, which libtpu keeps in scoped VMEM (the
# model's spill note says so) — measured 11.0 MiB estimated, 13.7 MiB needed on v5e.
SPILL_FLAGGED = {("grouped_lowrank_proj", "wo_a_projection")}


@pytest.fixture(scope="module")
def corpus():
    """name -> (fn, args, capture, lowering for its target with compile and exact VMEM)."""
    out = {}
    with tokamax_on_cpu():
        for name, case in CORPUS.items():
            fn, args = case()
            cap = pallaslab.capture(fn, *args)
            triton = any(k.backend == "triton" for k in cap)
            lowered = pallaslab.lower(fn, *args, target="gpu-h100" if triton else "tpu-v5e",
                                      compile=True, vmem_exact=not triton)
            out[name] = (fn, args, cap, lowered)
    return out


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_capture_grids_and_blocks(corpus, name):
    _, _, cap, _ = corpus[name]
    assert len(cap) == len(EXPECTED[name])
    for kernel, (kname, backend, grid, blocks) in zip(cap, EXPECTED[name], strict=True):
        kernel.check_invariants()
        assert (kernel.name, kernel.kind, kernel.backend, kernel.grid) == (
            kname, "pallas_call", backend, grid)
        for origin, block in blocks.items():
            assert kernel.operand(origin).block_shape == block, origin


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("name", sorted(n for n in CORPUS if "triton" not in n))
def test_vmem_estimate_against_libtpu(corpus, name):
    _, _, cap, lowered = corpus[name]
    assert lowered.ok, [d.message for k in lowered.kernels for d in k.diagnostics]
    for kernel, result in zip(cap, lowered.kernels, strict=True):
        (exact,) = [dict(d.data)["vmem_bytes"] for d in result.diagnostics
                    if d.code == "vmem-exact"]
        occ = occupancy(kernel, "v5e")
        if (name, kernel.name) in SPILL_FLAGGED:
            assert occ.spill_note is not None and occ.bytes <= exact
            continue
        assert abs(occ.bytes - exact) <= TOLERANCE * exact, (kernel.name, occ.bytes, exact)


@pytest.mark.parametrize("name", sorted(n for n in CORPUS if "triton" in n))
def test_triton_kernels_compile_to_sass_with_their_resources(corpus, name):
    _, _, _, lowered = corpus[name]
    (result,) = lowered.kernels
    assert result.ok, [d.message for d in result.diagnostics]
    assert [s.name for s in result.stages][-4:] == ["ttgir", "llir", "ptx", "sass"]
    res = result.resources
    assert res.smem_bytes and res.registers and res.spills is not None


def test_stepping_a_run_scoped_kernel_shows_its_equations(corpus):
    fn, args, _, _ = corpus["ragged_dot_gmm"]
    with tokamax_on_cpu():
        st = pallaslab.step(fn, *args)
        assert st.step() == ()
        equations = st.equations()
    assert equations and any(e.primitive == "run_scoped" for e in equations)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_compare_runs_every_kernel_as_the_caller_traced_it(corpus, name):
    """Captured under tokamax's cross-compile mode, the kernels trace again in the executors'
    worker under it (`model/library_contexts.py`): each compares ALL CLOSE with no executor
    named, where the worker's trace used to fail with "Not supported on cpu"."""
    fn, args, _, _ = corpus[name]
    with tokamax_on_cpu():
        result = pallaslab.compare(fn, *args)
    assert result.passed, result.verdict()
