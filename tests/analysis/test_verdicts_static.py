"""Classes of false verdicts of the static analysis and the lowering layer (issue 24, part 2),
each shown by a kernel of `kernels_verdicts.py`."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import kernels_verdicts as kv
import pytest

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main
from pallaslab.lowering import diagnostics

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(kv.__file__)


def findings(case, backend=None):
    fn, args = case()
    (insp,) = inspect_capture(pallaslab.capture(fn, *args), backend=backend)
    return insp.findings


def codes(case, backend=None):
    return {f.code: f.severity for f in findings(case, backend)}


def test_findings_and_gpu_stores_import_without_a_cycle():
    code = ("import sys, pallaslab.analysis.gpu_stores as g, pallaslab.analysis.findings as f;"
            "print(g.Finding is f.Finding)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"JAX_PLATFORMS": "cpu", "PATH": ""}, check=True)
    assert done.stdout.strip() == "True"
    source = (ROOT / "pallaslab/analysis/gpu_stores.py").read_text()
    assert "pallaslab.analysis.findings" not in source
    assert "docs/architecture.md" in importlib.import_module(
        "pallaslab.analysis.findings").__doc__


def test_revisit_mode_any_allows_non_consecutive_visits():
    assert "output-revisit" not in codes(kv.revisit_any)
    (revisit,) = [f for f in findings(kv.revisit_immediate) if f.code == "output-revisit"]
    assert revisit.severity == "error"
    assert revisit.message.endswith(
        "or let it be revisited anywhere with pl.Buffered(1, revisit=pl.RevisitMode.ANY).")


def test_atomics_into_a_shared_block_do_not_conflict():
    assert "parallel-write-conflict" not in codes(kv.atomic_shared_block)
    assert "parallel-write-conflict" not in codes(kv.spin_lock)
    plain = [f for f in findings(kv.plain_shared_block) if f.code == "parallel-write-conflict"]
    assert [(f.operand, f.severity) for f in plain] == [("outputs[0]", "error"),
                                                        ("outputs[1]", "error")]
    assert plain[0].message.endswith(
        "they race. Rule: programs must write different output blocks, or combine into a "
        "shared one with atomics only (plt.atomic_add, plt.atomic_max, ...).")


def test_an_output_the_body_never_writes_is_an_error(capsys):
    assert main(["check", f"{CASES}:unwritten_output"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert ("unwritten-output: outputs[1] (forgotten_ref) (kernel _forgets_second at "
            "kernels_verdicts.py:") in out
    assert ("the kernel body never writes this output: no store, atomic or DMA into "
            "forgotten_ref, and it is not aliased to an input (input_output_aliases)") in out


@pytest.mark.parametrize("case", [kv.dma_written_output, kv.pipeline_written_output,
                                  kv.aliased_unwritten_output, kv.atomic_shared_block,
                                  kv.spin_lock])
def test_outputs_written_other_ways_are_not_unwritten(case):
    assert "unwritten-output" not in codes(case)


def test_interpreted_kernels_get_hardware_rules_as_warnings(capsys):
    blocks = [f for f in findings(kv.interpreted_narrow_blocks) if f.code == "tpu-block-shape"]
    assert [(f.operand, f.severity) for f in blocks] == [
        ("args[0]", "warning"), ("args[1]", "warning"), ("outputs", "warning")]
    block = blocks[-1]
    assert block.message.startswith("on TPU: outputs: block shape (8, 32) of the float32 array "
                                    "(16, 128) breaks the TPU tiling rule")
    assert block.message.endswith("`pallaslab check --target tpu-v5e` judges it as an error.")
    assert main(["check", f"{CASES}:interpreted_narrow_blocks"]) == 0
    capsys.readouterr()
    assert codes(kv.interpreted_narrow_blocks, backend="tpu")["tpu-block-shape"] == "error"


def test_a_rank_0_block_states_the_rank_rule():
    (block,) = [f for f in findings(kv.scalar_output) if f.code == "tpu-block-shape"]
    assert block.message == (
        "outputs (o_ref): a rank-0 (scalar) float32 block in default memory breaks the TPU "
        "rule that a block outside SMEM has rank >= 1 (\"The Pallas TPU lowering currently "
        "supports only blocks of rank >= 1\"). Rule: put a scalar in SMEM "
        "(memory_space=pltpu.SMEM), or give it shape (1,) or (1, 1).")
    fn, args = kv.scalar_output()
    (lowered,) = pallaslab.lower(fn, *args, target="tpu-v5e", use_cache=False).kernels
    (diag,) = lowered.errors
    assert diag.code == "tpu-block-shape" and "8 and 128" not in diag.message
    assert diag.message.startswith(
        "outputs: block shape () of an array of shape () is not allowed by Mosaic TPU. Rule: a "
        "block in VMEM must have rank >= 1")


def test_a_mosaic_gpu_pallas_call_cannot_be_lowered(capsys):
    fn, args = kv.mosaic_gpu_params_pallas_call()
    (lowered,) = pallaslab.lower(fn, *args, target="gpu-h100", use_cache=False).kernels
    assert not lowered.ok
    (diag,) = lowered.errors
    assert diag.code == "mosaic-gpu-pallas-call"
    assert diag.message.endswith(
        "Write the kernel with plgpu.kernel(...) to use Mosaic GPU, or pass "
        "compiler_params=pallas.triton.CompilerParams(...) to lower it with Triton.")
    for target in ([], ["--target", "gpu-h100"]):
        assert main(["check", f"{CASES}:mosaic_gpu_params_pallas_call", *target]) == 1
        assert "mosaic-gpu-pallas-call" in capsys.readouterr().out


E2003 = (
    "INTERNAL: Mosaic failed to compile TPU kernel with MLIR module name `k` HLO name `k.1`: "
    "E2003: CompileTimeMosaicUnprovenMemoryAccessAlignment: cannot statically prove that index "
    "in dimension 1 is a multiple of 128\nSee https://openxla.org/xla/errors/error_2003\n\n"
    'at location: loc("get:"("get/get"(callsite("k"("/x/kernels.py":28:12 to :39)))))\n'
    '  %12 = "xir.vector_load"(%arg2) : (memref<128x512xf32, #xir.memory_space<vmem, tc>>)')


def test_compiler_errors_are_classified_by_their_code():
    diag = diagnostics.from_compile_error(E2003, "k", "tpu-v5e")
    assert diag.code == "mosaic-alignment"
    assert diag.message.startswith(
        "the tpu-v5e compiler cannot prove a memory access of kernel 'k' aligned at "
        "kernels.py:28 (E2003 CompileTimeMosaicUnprovenMemoryAccessAlignment: cannot "
        "statically prove that index in dimension 1 is a multiple of 128).")
    other = diagnostics.from_compile_error("E2999: CompileTimeSomethingNew: vmem memory",
                                           "k", "tpu-v5e")
    assert (other.code, other.get("compiler_code"), other.get("compiler_error")) == (
        "compile-error", "E2999", "CompileTimeSomethingNew")
    oom = diagnostics.from_compile_error(
        "RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom: Scoped allocation with size "
        "96.00M and limit 16.00M exceeded scoped vmem limit by 80.00M", "k", "tpu-v5e")
    assert oom.code == "vmem-oom" and oom.get("needed_bytes") == 96 * 2**20


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_a_32_lane_k_block_is_an_alignment_error_not_vmem_oom():
    fn, args = kv.matmul_k_blocks_of_32()
    (compiled,) = pallaslab.lower(fn, *args, target="tpu-v5e", compile=True,
                                  use_cache=False).kernels
    assert [d.code for d in compiled.errors] == ["mosaic-alignment"]
    assert "E2003 CompileTimeMosaicUnprovenMemoryAccessAlignment" in compiled.errors[0].message
