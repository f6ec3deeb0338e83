"""`make device-check` (python -m pallaslab.device_check) on this CPU-only machine: the clear
"no GPU" result, a dry run of the whole check with another executor in the device's place
(its comparison, profile, time limit and failures), and the summary it writes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from pallaslab.device_check import EXIT_AGREED, EXIT_NO_GPU, EXIT_PROBLEMS
from pallaslab.device_check.cases import DEFAULT_CASES, CheckCase, case_for
from pallaslab.device_check.report import (
    KernelReport,
    Summary,
    exit_status,
    report_from_json,
    write_summary,
)
from pallaslab.execute.profile import KERNEL, STEP, device_event_names, read_trace

ROOT = Path(__file__).resolve().parents[1]
MATMUL = "tests/peer/pallas_generic.py:matmul_block_spec"  # grid (2, 2), a reference
SPIN_CASE = """
import sys
sys.path.insert(0, {folder!r})
import jax.numpy as jnp
from bad_kernels import spins_in_program_1


def spinning():
    return spins_in_program_1, (jnp.ones((16, 128), jnp.float32),)
"""


def device_check(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]]))
    env.pop("JAX_PLATFORMS", None)  # as `make device-check` runs it: JAX finds no GPU itself
    return subprocess.run([sys.executable, "-m", "pallaslab.device_check", *map(str, args)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_no_gpu_is_said_and_nothing_counts_as_run(tmp_path):
    done = device_check("--out", tmp_path)
    assert done.returncode == EXIT_NO_GPU, done.stderr
    assert "no NVIDIA GPU is attached" in done.stdout and "cpu" in done.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "no-gpu" and summary["device"] is None
    assert "make device-check" in summary["reason"]
    assert [k["case"] for k in summary["kernels"]] == [c.spec for c in DEFAULT_CASES]
    assert summary["counts"] == {"not-run": len(DEFAULT_CASES)}
    assert all(k["reason"] == "no GPU is attached" and k["executors_ran"] == []
               for k in summary["kernels"])


def test_usage_errors_exit_2(tmp_path):
    done = device_check("--out", tmp_path, "--kernel-limit", "0")
    assert done.returncode == 2 and "--kernel-limit 0.0: a time limit is a positive" in \
        done.stderr
    assert device_check("--bogus").returncode == 2


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """The whole check on the CPU, `vectorized` in the device's place: a kernel that agrees
    and one that cannot be loaded (the check goes on)."""
    folder = tmp_path_factory.mktemp("device-check")
    done = device_check("--out", folder, "--subject", "vectorized", MATMUL,
                        "tests/no_such_file.py:kernel")
    return folder, done, json.loads((folder / "summary.json").read_text())


def test_dry_run_compares_profiles_and_keeps_going(dry_run):
    folder, done, summary = dry_run
    assert done.returncode == EXIT_PROBLEMS, done.stdout + done.stderr
    assert summary["status"] == "complete"
    assert summary["device"]["name"] == "dry run: vectorized in the device executor's place"
    assert summary["device"]["jax"] == jax.__version__
    matmul, missing = summary["kernels"]
    assert matmul["status"] == "agreed" and matmul["kernel"] == "_matmul_block_body"
    assert matmul["executors_ran"] == ["vectorized", "interpret", "reference"]
    assert matmul["outputs_compared"] == 1 and matmul["mismatched_programs"] == []
    assert {(p["a"], p["b"]) for p in matmul["pairs"]} == {("vectorized", "interpret"),
                                                          ("vectorized", "reference")}
    assert 0 <= matmul["max_abs_err"] < 1e-3
    # The profile: a raw trace in the folder, read into the Pipeline tab's measured track.
    trace = folder / matmul["trace_file"]
    assert trace.is_file() and trace.name.endswith(".xplane.pb")
    assert matmul["kernel_time_s"] > 0 and matmul["trace_events"] > 4
    assert matmul["trace_lanes"][0].endswith("(kernel)") and matmul["profile_error"] is None
    assert missing["status"] == "failed" and "no such file" in missing["reason"]
    assert summary["counts"] == {"agreed": 1, "failed": 1}
    assert "agreed" in done.stdout and "failed" in done.stdout


def test_a_kernel_past_its_limit_is_stopped_and_the_next_runs(tmp_path):
    """A kernel that spins for ever: its process is killed at the kernel's limit, and a new
    one checks the next kernel."""
    spin = tmp_path / "spin_case.py"
    spin.write_text(SPIN_CASE.format(folder=str(ROOT / "tests" / "cases")))
    done = device_check("--out", tmp_path, "--subject", "vectorized", "--kernel-limit", "3",
                        f"{spin}:spinning", "tests/no_such_file.py:kernel")
    assert done.returncode == EXIT_PROBLEMS, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    spun, missing = summary["kernels"]
    assert spun["status"] == "timed-out" and "kernel limit 3 s" in spun["reason"], spun
    assert missing["status"] == "failed"  # checked by a second process
    assert (tmp_path / "child-2.log").exists() and summary["status"] == "complete"


def test_the_trace_reads_back_as_the_same_timeline(dry_run):
    """The check's own CPU trace through `read_trace`: the kernel and its 4 grid steps; a
    CPU trace has no device planes, so the device reading finds nothing and says nothing."""
    folder, _, summary = dry_run
    path = str(folder / summary["kernels"][0]["trace_file"])
    events = read_trace(path)
    assert len(events) == summary["kernels"][0]["trace_events"]
    (k,) = np.flatnonzero(events.kind == KERNEL)
    assert sorted(events.program[events.kind == STEP].tolist()) == [0, 1, 2, 3]
    assert events.end[k] - events.start[k] == pytest.approx(summary["kernels"][0]["kernel_time_s"])
    assert len(read_trace(path, device=True)) == 0 and device_event_names(path) == []


def test_summary_round_trips_and_sets_the_exit_status(dry_run, tmp_path):
    _, _, summary = dry_run
    reports = tuple(report_from_json(k) for k in summary["kernels"])
    assert [r.to_json() for r in reports] == summary["kernels"]
    agreed = Summary("complete", summary["device"], None, reports[:1], 1.0, 450.0, 90.0)
    write_summary(tmp_path, agreed)
    assert json.loads((tmp_path / "summary.json").read_text())["counts"] == {"agreed": 1}
    assert exit_status(agreed) == EXIT_AGREED
    assert exit_status(Summary("complete", None, None, reports, 1.0, 450.0, 90.0)) == \
        EXIT_PROBLEMS
    cut = Summary("time-limit", None, "late", reports[:1], 1.0, 450.0, 90.0)
    assert exit_status(cut) == EXIT_PROBLEMS  # a check cut short is never a pass
    only_skipped = Summary("complete", None, None,
                           (KernelReport("x.py:k", "skipped", "not Hopper"),), 1.0, 1.0, 1.0)
    assert exit_status(only_skipped) == EXIT_PROBLEMS  # nothing ran on the device


def test_hopper_only_kernels_are_skipped_elsewhere():
    wgmma = case_for("tests/peer/gpu_mosaic.py:mgpu_wgmma")
    assert wgmma.skip_reason((9, 0)) is None and wgmma.skip_reason(None) is None
    assert wgmma.skip_reason((10, 0)) == (
        "mgpu_wgmma uses instructions of compute capability 9.x only (Hopper's warpgroup "
        "MMA); this GPU is 10.0")
    tma = case_for("tests/kernels_mgpu.py:tma_scale")
    assert tma.skip_reason((10, 0)) is None
    assert "needs compute capability 9.0 or newer" in tma.skip_reason((8, 6))
    assert CheckCase("x.py:k").skip_reason((7, 0)) is None  # any other case: the run says
