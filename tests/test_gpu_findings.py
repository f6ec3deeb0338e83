"""GPU write conflicts are decided from the elements programs store (issue 12): correct masked
and atomic Triton kernels pass `check --target gpu-h100`, a truly overlapping one fails and
names both programs and the elements; atomic_xchg leaves the HLO interpreter unavailable
without ending a comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernels import CATALOG

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.cli import main

CASES = Path(__file__).parent / "kernels.py"


@pytest.mark.parametrize("name", ["masked_vector_add", "masked_row_softmax",
                                  "atomic_block_sums", "atomic_exchange"])
def test_correct_masked_and_atomic_kernels_pass_check(capsys, name):
    assert main(["check", f"{CASES}:{name}", "--target", "gpu-h100"]) == 0, \
        capsys.readouterr().out


def test_overlapping_stores_fail_check_naming_programs_and_elements(capsys):
    assert main(["check", f"{CASES}:overlapping_stores", "--target", "gpu-h100"]) != 0
    out = " ".join(capsys.readouterr().out.split())
    assert "parallel-write-conflict" in out
    assert "programs (0,) and (1,) both store element (32,)" in out
    assert "(96 elements of outputs are stored by more than one program)" in out


def test_the_finding_carries_programs_and_elements():
    fn, args = CATALOG["overlapping_stores"].case()
    (insp,) = inspect_capture(pallaslab.capture(fn, *args))
    (finding,) = [f for f in insp.findings if f.code == "parallel-write-conflict"]
    assert finding.severity == "error" and finding.programs == ((0,), (1,))
    assert finding.blocks[:3] == ((32,), (33,), (34,))  # elements, for whole-array refs


def test_atomic_exchange_leaves_the_hlo_interpreter_unavailable_not_the_comparison():
    fn, args = CATALOG["atomic_exchange"].case()
    cmp = pallaslab.compare(fn, *args, executors=("interpret", "reference"),
                            reference=CATALOG["atomic_exchange"].reference)
    interp = cmp.result("interpret")
    assert interp.status == "unavailable"
    assert interp.unavailable == ("JAX's HLO interpreter (interpret=True) does not implement "
                                  "what the kernel uses: AtomicOpType.XCHG")
    assert cmp.result("reference").status == "ran"
