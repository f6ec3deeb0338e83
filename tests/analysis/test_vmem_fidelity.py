"""Our VMEM estimate against the real TPU compiler (libtpu, AOT on the CPU).

The compiler's true need is the smallest `vmem_limit_bytes` it accepts: a worker subprocess
(this file run as a script) bisects it with real compiles for v5e and v6e topologies, once per
session. The model must be within 5% of that need for every kernel in CASES.

KNOWN_GAPS lists kernels where it is not, and why: the buffers are still counted exactly (the
estimate is a lower bound), but libtpu spills large in-kernel values (flash-attention scores of
512 x 256 f32; a bf16 256x512 @ 512x256 dot on v5e's 128-wide MXU) into scoped VMEM, by an
amount that depends on its register allocation and schedule (measured: +76 KiB to +0.9 MiB).
The model flags those kernels (`Occupancy.spill_note`) instead of guessing an amount.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl

S = jax.ShapeDtypeStruct
CHIPS = ("v5e", "v6e")
GRANULARITY = 256  # bytes: bisection resolution
TOLERANCE = 0.05


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _copy(rows: int, cols: int, block_rows: int, dtype, **spec_kw):
    def fn(x):
        return pl.pallas_call(
            _copy_kernel, out_shape=S(x.shape, x.dtype), grid=(rows // block_rows,),
            in_specs=[pl.BlockSpec((block_rows, cols), lambda i: (i, 0), **spec_kw)],
            out_specs=pl.BlockSpec((block_rows, cols), lambda i: (i, 0)),
        )(x)

    return fn, (S((rows, cols), dtype),)


def _catalog(name):
    def case():
        from kernels import CATALOG

        return CATALOG[name].case()

    return case


def _local_matmul(bm, bk, bn, dtype):
    def case():
        from kernels import matmul

        return functools.partial(matmul, bm=bm, bk=bk, bn=bn), (S((1024, 1024), dtype),) * 2

    return case


def _jax_matmul(block_shape, block_k, dtype):
    def case():
        from jax.experimental.pallas.ops.tpu.matmul import matmul

        fn = functools.partial(matmul, block_shape=block_shape, block_k=block_k)
        return fn, (S((1024, 1024), dtype),) * 2

    return case


def _flash(block_q, block_k, dtype, seq=512):
    def case():
        from jax.experimental.pallas.ops.tpu import flash_attention as fa

        sizes = fa.BlockSizes(block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1)
        fn = functools.partial(fa.flash_attention, block_sizes=sizes)
        return fn, (S((1, 2, seq, 128), dtype),) * 3

    return case


CASES = {
    "matmul_f32_128": _catalog("matmul_f32"),  # ground truth: 448 KiB
    "matmul_bf16_128": _catalog("matmul_bf16"),
    "matmul_bf16_256x512x256": _local_matmul(256, 512, 256, jnp.bfloat16),  # v5e: 1612 KiB
    "elementwise_2d_add": _catalog("elementwise_2d_add"),
    "row_softmax": _catalog("row_softmax"),
    "layer_norm": _catalog("layer_norm"),  # (1, 512) weights: constant index map, 1 buffer
    "reduction_revisited_output": _catalog("reduction_revisited_output"),
    "scalar_prefetch_gather": _catalog("scalar_prefetch_gather"),
    "squeezed_dims": _catalog("squeezed_dims"),
    "vector_add_no_grid": _catalog("vector_add"),  # single step: 1 buffer, rank-1 tiling
    "copy_int8_48_rows": lambda: _copy(96, 256, 48, jnp.int8),  # 48 % 32 != 0: (8, 128) tile
    "copy_int8_64_rows": lambda: _copy(256, 256, 64, jnp.int8),  # (32, 128) tile
    "copy_bf16_24x200": lambda: _copy(96, 200, 24, jnp.bfloat16),  # lanes padded to 256
    "copy_f32_buffered1": lambda: _copy(512, 256, 64, jnp.float32,
                                        pipeline_mode=pl.Buffered(1)),
    "jax_matmul_f32": _jax_matmul((512, 512), 256, jnp.float32),
    "jax_matmul_bf16": _jax_matmul((256, 256), 512, jnp.bfloat16),
    "jax_flash_attention_bf16": _flash(128, 128, jnp.bfloat16),
    "jax_flash_attention_f32": _flash(128, 128, jnp.float32),
    "jax_flash_attention_512": _flash(512, 256, jnp.float32, seq=1024),
    # blocks narrower than 128 lanes take no scoped VMEM (tokamax's per-row outputs)
    "narrow_row_stats": _catalog("narrow_row_stats"),
    "narrow_scales_in": _catalog("narrow_scales_in"),
}

# (case, chip) -> why the estimate is more than 5% under the compiler (measured with libtpu
# 0.0.52: jax_matmul_bf16/v5e 1536 vs 1664 KiB; flash 512x256 2816 vs ~3680 KiB).
KNOWN_GAPS = {
    ("jax_matmul_bf16", "v5e"): "libtpu spills part of the 256x256 f32 dot result of a bf16 "
    "K=512 dot on v5e's 128-wide MXU (+128 KiB); v6e's 256-wide MXU needs nothing extra",
    ("jax_flash_attention_512", "v5e"): "the 512x256 f32 score matrix and its exp are "
    "materialized in scoped VMEM (+~870 KiB)",
    ("jax_flash_attention_512", "v6e"): "the 512x256 f32 score matrix and its exp are "
    "materialized in scoped VMEM (+~860 KiB)",
}


# --- the worker: runs in a subprocess so libtpu's environment and noise stay out of pytest ----


def _worker(names: list[str]) -> dict:
    import dataclasses
    import warnings

    warnings.filterwarnings("ignore")
    from jax.experimental import topologies
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType, SingleDeviceSharding

    import pallaslab
    from pallaslab.analysis.chips import chip as get_chip
    from pallaslab.analysis.occupancy import occupancy
    from pallaslab.model import _jax

    devices = {c: topologies.get_topology_desc(get_chip(c).topology, "tpu").devices[0]
               for c in CHIPS}

    def compiles(kernel, chip, limit):
        params = kernel.handle.eqn.params["compiler_params"]
        params = (dataclasses.replace(params, vmem_limit_bytes=limit) if params is not None
                  else pltpu.CompilerParams(vmem_limit_bytes=limit))
        call = _jax.kernel_callable(kernel, compiler_params=params)
        dev = devices[chip]
        avals = [S(a.shape, a.dtype, sharding=SingleDeviceSharding(dev))
                 for a in _jax.kernel_call_avals(kernel)]
        mesh = AbstractMesh((1,), ("x",), (AxisType.Explicit,), abstract_device=AbstractDevice(
            device_kind=dev.device_kind, num_cores=1, platform="tpu"))
        try:
            with jax.sharding.use_abstract_mesh(mesh):
                lowered = jax.jit(lambda *a: call(*a)).lower(*avals)
            lowered.compile()
            return True
        except Exception as err:  # the compiler's verdict
            if "vmem" not in str(err).lower():
                raise
            return False

    def need(kernel, chip, guess):
        lo, hi = 0, max(guess, GRANULARITY)
        while not compiles(kernel, chip, hi):
            lo, hi = hi, hi * 2
        if lo == 0 and compiles(kernel, chip, hi * 3 // 4):
            lo, hi = 0, hi * 3 // 4
        elif lo == 0:
            lo = hi * 3 // 4
        while hi - lo > GRANULARITY:
            mid = (lo + hi) // 2 // GRANULARITY * GRANULARITY
            lo, hi = (lo, mid) if compiles(kernel, chip, mid) else (mid, hi)
        return hi

    out: dict = {"cases": {}, "defaults": {}}
    for name in names:
        fn, args = CASES[name]()
        kernel = pallaslab.capture(fn, *args)[0]
        out["cases"][name] = {
            c: need(kernel, c, occupancy(kernel, c).bytes) for c in CHIPS
        }
    # The recorded default scoped limits: a kernel needing exactly the limit compiles without
    # vmem_limit_bytes; one needing 8 KiB more does not. (Single-step grid: 1 buffer each.)
    for c in CHIPS:
        limit = get_chip(c).default_scoped_vmem
        rows = limit // 2 // (1024 * 4)
        results = []
        for extra_rows in (0, 2):
            fn, args = _copy(rows + extra_rows, 1024, rows + extra_rows, jnp.float32)
            kernel = pallaslab.capture(fn, *args)[0]
            results.append(compiles(kernel, c, None))
        out["defaults"][c] = results
    return out


@pytest.fixture(scope="session")
def compiler_needs():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    # Other tests of the run may hold libtpu's lockfile (a process that built a topology).
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TPU_SKIP_MDS_QUERY": "1",
           "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", *CASES], capture_output=True, text=True,
        env=env, cwd=Path(__file__).parents[1], timeout=600, check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


def _estimate(name, chip):
    import pallaslab
    from pallaslab.analysis.occupancy import occupancy

    fn, args = CASES[name]()
    return occupancy(pallaslab.capture(fn, *args)[0], chip)


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("name", list(CASES))
def test_estimate_matches_compiler(compiler_needs, name, chip):
    truth = compiler_needs["cases"][name][chip]
    occ = _estimate(name, chip)
    error = (occ.bytes - truth) / truth
    report = (f"{name} on {chip}: estimate {occ.bytes / 1024:.2f} KiB, compiler needs "
              f"{truth / 1024:.2f} KiB (within {GRANULARITY} B), error {error:+.1%}")
    print(report)
    # The bisection brackets the need to GRANULARITY bytes: never above the true need.
    assert occ.bytes <= truth, report
    if (name, chip) in KNOWN_GAPS:
        assert error < -TOLERANCE, f"known gap closed? {report}"
        assert occ.spill_note is not None, report
        return
    assert truth - occ.bytes <= max(TOLERANCE * truth, GRANULARITY), report


@pytest.mark.tpu_compiler
def test_ground_truth_measured_with_libtpu(compiler_needs):
    # the needs measured when pallaslab was designed (docs/architecture.md, "Facts")
    assert compiler_needs["cases"]["matmul_f32_128"] == {"v5e": 448 * 1024, "v6e": 448 * 1024}
    assert compiler_needs["cases"]["matmul_bf16_256x512x256"]["v5e"] == 1612 * 1024


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("chip", CHIPS)
def test_recorded_default_scoped_limit(compiler_needs, chip):
    at_limit, above = compiler_needs["defaults"][chip]
    assert (at_limit, above) == (True, False), (
        f"libtpu's default scoped-VMEM limit for {chip} is no longer the recorded one "
        "(pallaslab/analysis/chips.py DEFAULT_SCOPED_VMEM)")


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    print(json.dumps(_worker(sys.argv[2:])))


# --- kernels whose bodies allocate: nested emit_pipelines, run_scoped, manual DMA, mesh -------

# Their true need comes from the lowering API's own bisection (`lower(..., vmem_exact=True)`),
# which re-traces them under the target's abstract TPU (emit_pipeline asks the chip).
ADVANCED = ("emit_pipeline_matmul", "bounded_slice_pipeline", "manual_dma_double_buffer",
            "run_scoped_sync_copy", "mesh_kernel")


@pytest.fixture(scope="module")
def advanced_needs():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    from kernels import CATALOG

    import pallaslab

    out = {}
    for name in ADVANCED:
        fn, args = CATALOG[name].case()
        cap = pallaslab.capture(fn, *args)
        for chip in CHIPS:
            (kernel,) = pallaslab.lower(cap, target=f"tpu-{chip}", vmem_exact=True).kernels
            out[name, chip] = (cap[0], kernel.resources.vmem_bytes)
    return out


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("name", ADVANCED)
def test_body_allocations_match_compiler(advanced_needs, name, chip):
    from pallaslab.analysis.occupancy import occupancy

    kernel, truth = advanced_needs[name, chip]
    occ = occupancy(kernel, chip)
    assert truth, f"{name} on {chip}: the compiler's need was not measured"
    report = (f"{name} on {chip}: estimate {occ.bytes / 1024:.2f} KiB, compiler needs "
              f"{truth / 1024:.2f} KiB, error {(occ.bytes - truth) / truth:+.1%}")
    print(report)
    assert abs(occ.bytes - truth) <= max(TOLERANCE * truth, GRANULARITY), report


def test_nested_pipeline_buffers_and_semaphores():
    # Measured above with libtpu: 3 operands x 2 buffers x (128, 128) f32 = 384 KiB, one DMA
    # semaphore per buffer; a pipeline over refs already in VMEM windows them in place.
    from kernels import CATALOG

    import pallaslab
    from pallaslab.analysis.occupancy import occupancy

    fn, args = CATALOG["emit_pipeline_matmul"].case()
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    assert (occ.bytes, occ.semaphores) == (384 * 1024, 6)
    assert [(o.origin, o.buffers, o.bytes) for o in occ.operands if o.space == "vmem"] == [
        (f"pipelines[0].{origin}", 2, 128 * 1024) for origin in ("args[0]", "args[1]", "outputs")]
    fn, args = CATALOG["bounded_slice_pipeline"].case()
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    assert occ.operand("pipelines[0].args[0]").bytes == 0 and occ.bytes == 512 * 1024
    fn, args = CATALOG["run_scoped_sync_copy"].case()
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    assert (occ.operand("scoped[0]").space, occ.bytes) == ("vmem", 64 * 1024)
