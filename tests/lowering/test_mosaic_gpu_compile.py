"""Mosaic GPU kernels (plgpu.kernel) really compile for H100 on a CPU host: XLA's CUDA plugin,
compile-only, in a worker, gives the PTX, ptxas' registers and spills, the SASS, and the
launch's shared memory; without the plugin the result says in one line what to install."""

from __future__ import annotations

import os

import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.occupancy_gpu import gpu_occupancy, mosaic_gpu_resources
from pallaslab.lowering import mosaic_gpu_compile
from pallaslab.views.memory_gpu import mosaic_gpu_section

# Mosaic GPU allocates all shared memory dynamically: the SMEM scratch, then the barriers
# (8 bytes each) at a 1024-byte aligned offset, as the kernel's gpu.launch says.
EXPECTED_SMEM = {"tma_scale": 256 * 4 + 8, "tma_blocks": 1024 + 8}

if mosaic_gpu_compile.missing_compiler() is not None and not os.environ.get("CI"):
    pytest.skip(f"{mosaic_gpu_compile.missing_compiler()}", allow_module_level=True)


def compile_h100(name):
    fn, args = CATALOG[name].case()
    (kernel,) = pallaslab.lower(fn, *args, target="gpu-h100", compile=True,
                                use_cache=False).kernels
    return kernel


def test_the_memory_model_of_shared_memory_matches_the_compiler():
    """The capture's figure (each array 1024-byte aligned, then the barriers) equals the launch's
    dynamic shared memory the real compile gives, on every Mosaic GPU catalog kernel."""
    for name in ("tma_scale", "tma_blocks", "warp_specialized", "gpu_emit_pipeline"):
        fn, args = CATALOG[name].case()
        compiled = compile_h100(name)
        assert compiled.compiled and compiled.ok, (name, compiled.diagnostics)
        (kernel,) = pallaslab.capture(fn, *args)
        assert mosaic_gpu_resources(kernel).shared_bytes == compiled.resources.smem_bytes, name


def test_memory_with_gpu_figures_shows_the_compiled_registers():
    fn, args = CATALOG["warp_specialized"].case()
    kernel = pallaslab.capture(fn, *args)[0]
    _, h100, b200 = mosaic_gpu_section(kernel, compiled=True)["gpus"]
    for row in (h100, b200):
        assert row["error"] is None and row["spills"] == 0
        assert row["shared_bytes"] == 1040 and row["registers"] > 0
        occ = gpu_occupancy(1040, row["registers"], 8, row["gpu"])
        assert row["blocks_per_sm"] == occ.blocks_per_sm


@pytest.mark.parametrize("name", sorted(EXPECTED_SMEM))
def test_a_tma_kernel_compiles_to_ptx_and_sass_with_its_resources(name):
    kernel = compile_h100(name)
    assert kernel.backend == "mosaic-gpu"
    assert kernel.compiled and kernel.ok, kernel.diagnostics
    assert kernel.errors == ()
    assert ".entry" in kernel.stage("ptx").text
    assert ".target sm_90a" in kernel.stage("ptx").text
    assert "Used" in kernel.stage("ptxas").text
    assert kernel.stage("sass").text.strip()
    res = kernel.resources
    assert res.registers is not None and res.registers > 0
    assert res.spills == 0
    assert res.smem_bytes == EXPECTED_SMEM[name]


def test_the_b200_target_compiles_for_sm_100a():
    fn, args = CATALOG["tma_scale"].case()
    (kernel,) = pallaslab.lower(fn, *args, target="gpu-b200", compile=True,
                                use_cache=False).kernels
    assert kernel.compiled and kernel.ok, kernel.diagnostics
    assert ".target sm_100a" in kernel.stage("ptx").text
    assert kernel.resources.smem_bytes == EXPECTED_SMEM["tma_scale"]


def test_a100_is_not_compiled_for_mosaic_gpu():
    fn, args = CATALOG["tma_scale"].case()
    (kernel,) = pallaslab.lower(fn, *args, target="gpu-a100", compile=True,
                                use_cache=False).kernels
    assert not kernel.compiled
    assert {d.code for d in kernel.diagnostics} >= {"unsupported-target", "no-compiler"}


def test_without_the_compiler_the_result_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv(mosaic_gpu_compile.ENV_VAR, str(tmp_path))
    kernel = compile_h100("tma_scale")
    assert not kernel.compiled and kernel.ok
    assert "ptx" not in kernel.stage_names
    (note,) = [d for d in kernel.diagnostics if d.code == "no-compiler"]
    assert note.severity == "info"
    assert "make mosaic-gpu-compiler" in note.message and str(tmp_path) in note.message
    assert "\n" not in note.message


def test_the_lowering_view_shows_ptx_ptxas_and_sass_when_compiled():
    fn, args = CATALOG["tma_blocks"].case()
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args), targets=["gpu-h100"])
    text = wb.view("lowering", compile=True).to_text()
    assert "(mosaic-gpu): ok, compiled" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["SMEM", "1.0", "KiB", "the", "compiler"] in rows
    assert ["registers", "10", "the", "compiler"] in rows
    assert ["spills", "0", "B", "the", "compiler"] in rows
    assert not any(r[:1] == ["VMEM"] for r in rows)
    assert "ptx (" in text and "ptxas (" in text and "sass (" in text
