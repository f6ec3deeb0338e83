"""Mosaic GPU SMEM used before its TMA copy is done (issue 24): JAX's GPU interpreter lands
copies at once, so these kernels passed `check` and `compare`. The kernel body is walked in
program order: `unwaited-copy` (SMEM read before the copy's barrier is waited) and
`uncommitted-smem` (SMEM the threads wrote, TMA-copied out with no commit_smem between)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import kernels_mgpu
import kernels_run_verdicts
import pytest
from catalog import catalog_line
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import pallaslab
from pallaslab.analysis.inspection import inspect_capture
from pallaslab.analysis.smem_order import SMEM_ORDER_CODES
from pallaslab.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "peer"))
import gpu_mosaic
import gpu_wrong

pytestmark = pytest.mark.filterwarnings("error::UserWarning:pallaslab")

V = "tests/kernels_run_verdicts.py"
F32 = jnp.float32


def _cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def _smem_findings(fn, args):
    return [f for insp in inspect_capture(pallaslab.capture(fn, *args))
            for f in insp.findings if f.code in SMEM_ORDER_CODES]


def test_check_fails_a_read_before_the_copy_s_barrier_wait_naming_the_ref_and_both_lines(
        capsys):
    code, out = _cli(capsys, "check", f"{V}:tma_read_before_wait", "--json")
    found = [p for k in json.loads(out)["kernels"] for p in k["problems"]
             if p["code"] == "unwaited-copy"]
    assert code == 1
    copy = catalog_line("plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)",
                        "kernels_run_verdicts.py")
    read = catalog_line("o_gmem[...] = x_smem[...] * 2.0", "kernels_run_verdicts.py")
    assert [p["severity"] for p in found] == ["error"]
    assert found[0]["message"] == (
        f"body: SMEM scoped[0] (x_smem) is used (read) at {read} while the TMA copy into it at "
        f"{copy} may still be in flight: no plgpu.barrier_wait(barrier) between them. Rule: "
        "SMEM that plgpu.copy_gmem_to_smem fills may be touched only after waiting on the "
        "copy's barrier. JAX's GPU interpreter lands a TMA copy at once, so runs agree where "
        "a GPU uses stale SMEM.")


def test_the_same_kernel_waiting_first_is_clean(capsys):
    code, out = _cli(capsys, "check", f"{V}:tma_read_after_wait", "--json")
    assert code == 0, out
    assert not _smem_findings(*kernels_run_verdicts.tma_read_after_wait())


def test_compare_exits_1_on_the_read_before_the_wait_although_the_outputs_agree(capsys):
    code, out = _cli(capsys, "compare", f"{V}:tma_read_before_wait", "--executors",
                     "gpu-interpret", "--reference", f"{V}:tma_read_reference", "--json")
    payload = json.loads(out)
    assert code == 1, payload.get("verdict")
    assert payload["allclose"] and not payload["passed"]
    assert payload["verdict"] == "all close, but static analysis found errors: unwaited-copy"
    assert [(s["code"], s["operand"]) for s in payload["static_findings"]] == [
        ("unwaited-copy", "scoped[0]")]


def test_the_peer_corpus_s_wrong_mosaic_gpu_kernels_are_errors():
    (read,) = _smem_findings(*gpu_wrong.mgpu_read_before_tma_wait())
    assert (read.code, read.operand) == ("unwaited-copy", "scoped[0]")
    assert "SMEM scoped[0] (x_smem) is used (read) at gpu_wrong.py:" in read.message
    (uncommitted,) = _smem_findings(*gpu_wrong.mgpu_copy_out_without_commit())
    store = catalog_line("o_smem[...] = x_gmem[...] * 2.0", "peer/gpu_wrong.py")
    copy = catalog_line("plgpu.copy_smem_to_gmem(o_smem, o_gmem)", "peer/gpu_wrong.py")
    assert (uncommitted.code, uncommitted.severity) == ("uncommitted-smem", "error")
    assert uncommitted.message.startswith(
        f"_no_commit_body: SMEM scoped[0] (o_smem) is written by the threads at "
        f"{store.removeprefix('peer/')} and TMA-copied to GMEM at {copy.removeprefix('peer/')} "
        "with no plgpu.commit_smem() between.")


def _cases(module, prefix=""):
    return [(n, f) for n, f in vars(module).items() if inspect.isfunction(f)
            and f.__module__ == module.__name__ and not n.startswith("_") and
            n.startswith(prefix) and not n.endswith("_reference")]


@pytest.mark.parametrize("name,case", [*_cases(gpu_mosaic, "mgpu_"),
                                       *[(n, getattr(kernels_mgpu, n))
                                         for n in kernels_mgpu.__all__]])
def test_correct_mosaic_gpu_kernels_stay_clean(name, case):
    """`mgpu_tma_loop` reuses one buffer: its next copy is issued after the previous data's
    read in program order, so it is no hazard here (see the report of issue 24)."""
    fn, args = case()[:2]
    assert not _smem_findings(fn, args), name


def _prefetch_without_wait(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem.at[pl.ds(0, 128)], x_smem, barrier)
    plgpu.barrier_wait(barrier)

    @pl.loop(0, 2)
    def _(i):
        o_gmem[pl.ds(i * 128, 128)] = x_smem[...]  # LOOP-READ (the 2nd time: not waited)
        plgpu.copy_gmem_to_smem(x_gmem.at[pl.ds(128, 128)], x_smem, barrier)  # PREFETCH


def test_a_copy_issued_for_the_next_iteration_is_in_flight_at_its_read():
    fn = plgpu.kernel(_prefetch_without_wait, out_type=jax.ShapeDtypeStruct((256,), F32),
                      scratch_types=[plgpu.SMEM((128,), F32), plgpu.Barrier()])
    found = _smem_findings(fn, (jnp.arange(256, dtype=F32),))
    here = Path(__file__).name
    read, prefetch = (catalog_line(f"# {m}", here) for m in ("LOOP-READ", "PREFETCH"))
    assert {f.code for f in found} == {"unwaited-copy"}
    assert any(f"(read) at {read} while the TMA copy into it at {prefetch}" in f.message
               for f in found), [f.message for f in found]


def _copy_in_one_branch(x_gmem, o_gmem, x_smem, barrier):
    @pl.when(jax.lax.axis_index("x") == 0)
    def _():
        plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)

    o_gmem[...] = x_smem[...]  # in block 0 the copy may still be in flight


def _halves(x_gmem, o_gmem, x_smem, barrier):
    plgpu.copy_gmem_to_smem(x_gmem.at[pl.ds(0, 128)], x_smem.at[pl.ds(0, 128)], barrier)
    o_gmem[pl.ds(128, 128)] = x_smem[pl.ds(128, 128)]  # the other half: no copy there
    plgpu.barrier_wait(barrier)
    o_gmem[pl.ds(0, 128)] = x_smem[pl.ds(0, 128)]


def test_either_branch_of_a_cond_counts_and_disjoint_windows_do_not():
    args = (jnp.arange(256, dtype=F32),)
    out, smem = jax.ShapeDtypeStruct((256,), F32), [plgpu.SMEM((256,), F32), plgpu.Barrier()]
    branch = plgpu.kernel(_copy_in_one_branch, out_type=out, scratch_types=smem, grid=(2,),
                          grid_names=("x",))
    assert [f.code for f in _smem_findings(branch, args)] == ["unwaited-copy"]
    halves = plgpu.kernel(_halves, out_type=out, scratch_types=smem)
    assert not _smem_findings(halves, args)


def test_inspect_json_gives_a_barrier_s_element_not_its_int32_stand_in(capsys):
    code, out = _cli(capsys, "inspect", f"{V}:tma_read_after_wait", "--json")
    (kernel,) = json.loads(out)["kernels"]
    assert code == 0
    assert [(s["param"], s["dtype"], s["value_type"]) for s in kernel["scoped"]] == [
        ("x_smem", "float32", None), ("barrier", "barrier", "barrier")]
