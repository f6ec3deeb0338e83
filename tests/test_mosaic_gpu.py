"""Mosaic GPU kernels on a CPU host (issue 12): TMA and barrier kernels compare equal to their
references under the default executors (the GPU interpreter, said in the note); a pallas_call
with Mosaic GPU params says exactly why it is shown lowered with Triton."""

from __future__ import annotations

import pytest
from kernels import CATALOG

import pallaslab


@pytest.mark.parametrize("name", ["tma_scale", "tma_blocks"])
def test_tma_and_barrier_kernels_match_their_references_by_default(name):
    entry = CATALOG[name]
    fn, args = entry.case()
    cmp = pallaslab.compare(fn, *args, reference=entry.reference)
    assert cmp.executors == ("gpu-interpret", "reference") and cmp.passed
    assert cmp.notes == ("executors chosen by default: gpu-interpret, reference (Mosaic GPU "
                         "kernels: gpu-interpret)",)


def test_their_smem_buffers_and_barriers_are_captured():
    fn, args = CATALOG["tma_blocks"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    assert (kernel.kind, kernel.backend, kernel.grid) == ("mesh", "mosaic_gpu", (2,))
    assert [(op.param, op.memory_space, op.shape) for op in kernel.scoped] == [
        ("x_smem", "smem", (128,)), ("barrier", "smem", ())]


def test_a_mosaic_gpu_pallas_call_says_why_it_is_lowered_with_triton():
    fn, args = CATALOG["mosaic_gpu_pallas_call"].case()
    (result,) = pallaslab.lower(fn, *args, target="gpu-h100").kernels
    assert result.backend == "triton" and result.ok
    (note,) = [d for d in result.diagnostics if d.code == "mosaic-gpu-pallas-call"]
    assert note.severity == "warning"
    assert note.message == (
        "kernel '_add_one' is a pallas_call with Mosaic GPU compiler params (all defaults), "
        "which JAX 0.12 cannot lower with Mosaic GPU: pallas_call chooses its GPU lowering by "
        "the CompilerParams type and only Triton's is registered; Mosaic GPU lowering is for "
        "plgpu.kernel. Shown instead: the Triton lowering of the same kernel body, without "
        "those params.")
