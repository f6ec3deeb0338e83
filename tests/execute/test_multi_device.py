"""Multi-device kernels (issue 13): kernels inside shard_map that talk between devices are
captured with their mesh and remote copies, run on N simulated CPU devices in a worker process
(`devices=N`, `--devices N`) under tpu-interpret, chosen because they communicate, and a
kernel waiting for a signal no one sends is reported as a deadlock, not a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kernels_multi
import numpy as np
import pytest
from helpers import line_ref
from kernels import CATALOG

import pallaslab
from pallaslab.cli import main

DEVICES = 4
COLLECTIVES = ["right_permute", "ring_all_gather", "ring_all_reduce", "reduce_scatter"]


def compare_on_devices(name, **options):
    entry = CATALOG[name]
    fn, args = entry.case()
    return pallaslab.compare(fn, *args, reference=entry.reference, devices=DEVICES, **options)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_collectives_match_their_references_on_four_simulated_devices(name):
    cmp = compare_on_devices(name)
    assert cmp.executors == ("tpu-interpret", "reference"), cmp.notes
    assert cmp.passed, (cmp.verdict(), [r.reason for r in cmp.results])
    # Here (one device) a ring of one may not communicate at all: on 4 devices it does.
    assert cmp.notes[0] in (
        "executors chosen by default: tpu-interpret, reference (the HLO interpreter cannot run "
        "kernels that communicate between devices (remote DMAs, semaphore signals to a "
        f"device); tpu-interpret can (kernel {cmp.kernels[0].name}))",
        "executors chosen by default: tpu-interpret, reference (kernels inside shard_map on 4 "
        "devices may talk to each other (remote DMAs, semaphores): tpu-interpret runs them)")
    assert cmp.notes[-1].startswith(f"ran on {DEVICES} simulated CPU devices in a worker "
                                    "process; the kernels shown were captured here on 1")


def test_a_wrong_result_on_devices_is_a_mismatch():
    entry = CATALOG["right_permute"]
    fn, args = entry.case()
    cmp = pallaslab.compare(fn, *args, reference=lambda x: x, devices=DEVICES)
    assert not cmp.passed and cmp.complete


def test_a_missing_signal_is_a_deadlock_finding_not_a_hang():
    entry = CATALOG["missing_signal"]
    fn, args = entry.case()
    result = pallaslab.run(fn, *args, devices=DEVICES, timeout=120)
    assert result.executor == "tpu-interpret" and result.status == "failed"
    (finding,) = [f for f in result.findings if f.code == "deadlock"]
    assert finding.severity == "error"
    assert finding.message.startswith("every device is blocked and none can signal "
                                      "again: device 0 (core 0) waits on semaphore scratch[0] "
                                      "for a count of 1")
    for device in range(DEVICES):
        assert f"device {device} (core 0) waits on semaphore" in finding.message
    assert "for a count of 1, which stays at 0" in finding.message
    wait = line_ref("pl.semaphore_wait(sem, 1)", kernels_multi.__file__)
    assert finding.message.endswith(f"{wait})")
    assert result.error == f"deadlock: {finding.message}"


def test_capture_names_the_mesh_and_the_remote_copy():
    fn, args = CATALOG["right_permute"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    assert kernel.context == ("shard_map",) and kernel.communicates
    assert kernel.device_mesh is not None and kernel.device_mesh.axes == (("x", 1),)
    (dma,) = kernel.dmas
    assert (dma.kind, dma.src, dma.dst, dma.device_id_type) == (
        "remote", "args[0]", "outputs", "mesh")
    assert dma.device_id == "((axis_index(x) + 1) % 1)"  # axis_size folded: one device here
    fn, args = CATALOG["ring_all_reduce"].case()
    (kernel,) = pallaslab.capture(fn, *args)
    assert not any(op.device for op in kernel.semaphore_ops)  # a ring of one sends no signal


def test_the_interpreters_that_cannot_communicate_say_so():
    fn, args = CATALOG["right_permute"].case()
    result = pallaslab.run(fn, *args, executor="interpret", devices=DEVICES)
    assert result.status == "unavailable"


def test_cli_compare_on_devices(capsys):
    case = f"{kernels_multi.__file__}:right_permute"
    ref = f"{kernels_multi.__file__}:_right_permute_reference"
    assert main(["compare", case, "--reference", ref, "--devices", str(DEVICES),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["executors"] == ["tpu-interpret", "reference"] and out["passed"]
    assert main(["compare", case, "--devices", "0"]) == 2
    assert "number of simulated CPU devices" in capsys.readouterr().err


def test_inspect_json_has_the_device_mesh_and_the_device_id(capsys):
    assert main(["inspect", f"{kernels_multi.__file__}:right_permute", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["device_mesh"] == {"kind": "shard_map", "axes": [["x", 1]], "warpgroups": None}
    assert k["communicates"] is True
    (dma,) = k["dmas"]
    assert (dma["kind"], dma["device_id"], dma["device_id_type"]) == (
        "remote", "((axis_index(x) + 1) % 1)", "mesh")


def test_the_devices_view_draws_each_ring_step_between_neighbours():
    fn, args = CATALOG["ring_all_gather"].case()
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args))
    assert "devices" in [t.name for t in wb.tabs()]
    assert "no run on several devices yet" in wb.view("devices").to_text()
    view = wb.view("devices", result=pallaslab.run(fn, *args, devices=DEVICES))
    p = view.payload()
    assert p["devices"] == DEVICES and p["status"] == "ran" and p["error"] is None
    remote = [(t["step"], t["src"], t["dst"]) for t in p["transfers"] if t["remote"]]
    # 3 ring steps, each device sending to its right neighbour
    assert sorted(remote) == sorted((step, d, (d + 1) % DEVICES) for step in range(DEVICES - 1)
                                    for d in range(DEVICES))
    assert p["remote_bytes"] == len(remote) * 8 * 128 * 4
    assert {s["kind"] for s in p["semaphores"]} == {"signal", "wait"}
    rows = [line.split() for line in view.to_text().splitlines()]
    assert ["2", "device", "3", "device", "0", "4,096"] in [r[:6] for r in rows]
    steps = [(int(r[0]), r[1:3] != r[3:5], int(r[2])) for r in rows if r and r[0].isdigit()]
    assert steps == sorted(steps)  # ring-step order, local copies first, then by device
    html = view.to_html()
    assert html.count("marker-end") == len(p["transfers"]) and "<svg" in html


def test_the_devices_view_of_a_deadlock_shows_the_finding():
    fn, args = CATALOG["missing_signal"].case()
    wb = pallaslab.Workbench(pallaslab.capture(fn, *args))
    p = wb.view("devices", result=pallaslab.run(fn, *args, devices=DEVICES)).payload()
    assert p["status"] == "failed" and p["error"] is None  # the finding says it
    assert [f["code"] for f in p["findings"]] == ["deadlock"]


def test_the_magic_compares_on_devices_and_the_devices_tab_shows_the_run(shown):
    pytest.importorskip("IPython")
    from ipython_shell import ipython_shell, run

    for shell in ipython_shell("from kernels import CATALOG\n"
                               "fn, (x,) = CATALOG['right_permute'].case()\n"
                               "ref = CATALOG['right_permute'].reference\n"):
        result, _ = run(shell, "%%pallas --compare tpu-interpret,reference=ref --devices 4\n"
                               "fn(x)\n")
        assert result.success, result.error_in_exec
        # the cell's value is the 4-device run's, not this process's one-device trace
        x = np.asarray(shell.user_ns["x"])
        np.testing.assert_array_equal(np.asarray(result.result),
                                      np.roll(x.reshape(DEVICES, -1, 128), 1, 0).reshape(x.shape))
        (wb,) = shown
        comparison = wb.view("compare").comparison
        assert comparison.passed and comparison.executors == ("tpu-interpret", "reference")
        p = wb.view("devices").payload()
        assert sorted((t["src"], t["dst"]) for t in p["transfers"]) == [
            (d, (d + 1) % DEVICES) for d in range(DEVICES)]
        bad, _ = run(shell, "%%pallas --devices 0\nfn(x)\n")
        assert not bad.success and "--devices 0: the number of simulated CPU devices is a " \
            "whole number >= 1" in str(bad.error_in_exec)


def test_the_magics_devices_alone_run_the_cell_on_that_many_devices(shown):
    """`--devices 4` without --compare: the value is the run on 4 devices, and the Devices
    tab draws that run (it does not run again)."""
    pytest.importorskip("IPython")
    from ipython_shell import ipython_shell, run

    for shell in ipython_shell("from kernels import CATALOG\n"
                               "fn, (x,) = CATALOG['right_permute'].case()\n"):
        result, out = run(shell, "%%pallas --devices 4\nout = fn(x)\n")
        assert result.success, result.error_in_exec
        x = np.asarray(shell.user_ns["x"])
        np.testing.assert_array_equal(np.asarray(shell.user_ns["out"]),
                                      np.roll(x.reshape(DEVICES, -1, 128), 1, 0).reshape(x.shape))
        assert "the value is the tpu-interpret run's on 4 simulated devices" in out.stdout
        (wb,) = shown
        view = wb.view("devices")
        assert view.run is wb.session.device_run and view.run.status == "ran"
        assert len(view.payload()["transfers"]) == DEVICES


def test_an_injected_bug_is_attributed_to_the_device_and_the_ring_step():
    cmp = compare_on_devices("ring_all_gather_wrong_neighbour")
    assert cmp.complete and not cmp.passed
    shards = [n for n in cmp.notes if n.startswith("device ")]
    assert len(shards) == DEVICES  # every device ends with wrong slots
    # Sending two to the right, device 0's slot 1 arrives from device 2 at step 1 (device 1
    # never sends to it), and device 1's slot 0 (device 0's shard) never arrives at all.
    assert shards[0].startswith(
        "device 0 (rows 0-3 of outputs): 2,048 mismatched elements; the first, (1, 0, 0) on "
        "the device, was last written by the DMA of step 1 from device 2 (kernels_multi.py:")
    assert shards[1] == ("device 1 (rows 4-7 of outputs): 2,048 mismatched elements; the "
                         "first, (0, 0, 0) on the device, was written by no DMA (the kernel's "
                         "own store, or nothing)")


@pytest.mark.parametrize("target", ["tpu-v5e", "tpu-v6e"])
def test_communicating_kernels_lower_and_compile_for_tpu(target):
    pytest.importorskip("libtpu")
    fn, args = CATALOG["ring_all_gather"].case()
    (k,) = pallaslab.lower(fn, *args, target=target, compile=True).kernels
    assert k.ok and k.compiled, k.diagnostics
    mosaic = k.stage("mosaic").text
    assert "tpu.enqueue_dma" in mosaic and "device_id(" in mosaic  # the remote copy
    (note,) = [d for d in k.diagnostics if d.code == "shard-map-mesh"]
    assert note.severity == "info" and "inside shard_map (mesh x=1 as captured)" in note.message


def test_a_race_with_a_remote_copy_names_the_devices():
    fn, args = CATALOG["remote_write_race"].case()
    result = pallaslab.run(fn, *args, devices=DEVICES)
    races = [f for f in result.findings if f.code == "data-race"]
    assert len(races) == DEVICES  # one per receiving device
    for device in range(DEVICES):
        assert any(f"write of outputs[()] by a DMA into device {device} and write of [()] by "
                   f"device {device} (core 0) are not ordered. One side is a DMA" in f.message
                   for f in races)


def test_stepping_in_lockstep_shows_each_ring_step_land():
    entry = CATALOG["ring_all_gather"]
    fn, args = entry.case()
    st = pallaslab.step(fn, *args, devices=DEVICES)
    try:
        assert st.position == 0 and not st.transfers and not st.done
        seen = []
        for step in range(DEVICES - 1):
            st.step()
            assert st.programs == dict.fromkeys(range(DEVICES), step + 1)
            remote = sorted((t.src_device, t.dst_device) for t in st.transfers
                            if t.remote and t.step == step)
            assert remote == [(d, (d + 1) % DEVICES) for d in range(DEVICES)]  # this ring step
            seen.append(len(st.transfers))
        assert seen == [8, 12, 16]  # 4 local copies, then 4 remote ones per ring step
        assert st.done and st.result is not None and st.result.status == "ran"
        x = np.asarray(args[0]).reshape(DEVICES, -1, 128)
        np.testing.assert_array_equal(st.result.outputs[0], np.tile(x, (DEVICES, 1, 1)))
    finally:
        st.close()


def test_stepping_on_devices_says_a_kernel_cannot_be_picked():
    fn, args = CATALOG["ring_all_gather"].case()
    with pytest.raises(pallaslab.PallasLabError) as err:
        pallaslab.step(fn, *args, kernel=0, devices=DEVICES)
    assert str(err.value) == (f"step(..., devices={DEVICES}) steps every kernel of the function "
                              "together, in lockstep on the devices: kernel=0 selects none; "
                              "leave it out")


def test_stepping_a_deadlock_ends_with_the_finding():
    fn, args = CATALOG["missing_signal"].case()
    st = pallaslab.step(fn, *args, devices=DEVICES)
    result = st.run()
    assert [f.code for f in result.findings] == ["deadlock"]


def test_stepping_one_device_shows_it_blocked_with_its_dma_in_flight():
    fn, args = CATALOG["ring_all_gather"].case()
    st = pallaslab.step(fn, *args, devices=DEVICES)
    try:
        with pytest.raises(pallaslab.PallasLabError, match="step every device once first"):
            st.step(device=0)
        st.step()  # ring step 0 everywhere
        st.step(device=0)  # device 0 alone into ring step 1
        assert st.programs[0] == 2 and all(st.programs[d] == 1 for d in (1, 2, 3))
        assert st.busy == [0]  # it waits for device 3's block, which has not been sent
        assert [(t.src_device, t.dst_device, t.step) for t in st.in_flight] == [(0, 1, 1)]
        st.step(device=3)  # device 3 sends to device 0, which can finish its program
        assert st.busy == [3]
        assert (3, 0, 1) in [(t.src_device, t.dst_device, t.step) for t in st.transfers]
        assert st.run().status == "ran"
    finally:
        st.close()


def _write_top_half(x_ref, o_ref):
    o_ref[:4, :] = x_ref[:4, :]  # rows 4-7 of each device's shard are never written


def _half_written(x):
    import jax
    from jax.experimental import pallas as pl

    def kernel(shard):
        return pl.pallas_call(_write_top_half,
                              out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype))(shard)

    return kernels_multi._on_devices(kernel)(x)


@pytest.mark.parametrize("devices", [None, DEVICES])
def test_output_a_kernel_inside_shard_map_never_writes_is_found(devices):
    x = np.ones((4 * 8, 128), np.float32)
    result = pallaslab.run(_half_written, x, executor="tpu-interpret", devices=devices)
    assert result.status == "ran"
    [finding] = [f for f in result.findings if f.code == "unwritten-output"]
    assert finding.operand == "outputs"
    if devices is None:  # one device here: its shard is the whole array, rows 4-31 unwritten
        assert finding.message.startswith("_write_top_half: outputs: 3,584 of 4,096 element(s) "
                                          "hold NaN after the run under tpu-interpret:")
    else:
        assert finding.message.startswith(
            "_write_top_half: outputs: 2,048 of 4,096 element(s) hold NaN after the run under "
            "tpu-interpret on device(s) 0, 1, 2, 3 (each device's 8 rows of the "
            "gathered output; blocks are the first one's)")


def test_the_cli_inspects_a_ring_as_four_devices_run_it(tmp_path):
    """`--devices 4` traces the case on 4 simulated devices before JAX starts: the ring has
    its 3 steps and the mesh x=4 (here, on one device, a ring of one has no step to take)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PALLASLAB_CACHE_DIR": str(tmp_path)}
    env.pop("XLA_FLAGS", None)
    root = Path(kernels_multi.__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-m", "pallaslab", "inspect", "tests/kernels_multi.py:ring_all_gather",
         "--devices", "4", "--json"], cwd=root, env=env, capture_output=True, text=True,
        timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (k,) = json.loads(out.stdout)["kernels"]
    assert k["grid"] == [3] and k["device_mesh"]["axes"] == [["x", 4]]


SKIPS_ON_ONE_DEVICE = """
import jax, numpy as np
from kernels_multi import _right_permute, _right_permute_reference

MESH = jax.sharding.Mesh(np.array(jax.devices()), ("x",))  # Device objects: no pickling


def case():
    x = jax.numpy.arange(4 * 8 * 128, dtype=jax.numpy.float32).reshape(32, 128)
    # like JAX's all_gather: on one device there is nothing to send, so no kernel
    return (lambda x: x if MESH.size == 1 else _right_permute(x)), (x,)


def reference(x):
    return _right_permute_reference(x)
"""


def test_the_cli_compares_on_devices_a_case_that_has_no_kernel_on_one(tmp_path):
    """`compare --devices 4` traces the case as on 4 devices (not on this process's one,
    where it launches no kernel), and runs it here when it cannot travel to a worker."""
    case = tmp_path / "skips.py"
    case.write_text(SKIPS_ON_ONE_DEVICE)
    root = Path(kernels_multi.__file__).resolve().parent
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PALLASLAB_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(root)}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pallaslab", "compare", f"{case}:case", "--reference",
         f"{case}:reference", "--devices", "4", "--json"], cwd=root, env=env,
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["passed"] and result["executors"] == ["tpu-interpret", "reference"]
    [run] = [r for r in result["runs"] if r["executor"] == "tpu-interpret"]
    assert any(n.startswith("ran in this process, which has the devices asked for")
               for n in run["notes"]), run["notes"]
