"""Kernels inside shard_map that talk between devices compile as one program over the devices
of a multi-chip TPU topology (issue 13, item 5): lowered here to StableHLO with one partition
per device (an abstract mesh: no device and no libtpu in this process), compiled by libtpu in
its worker over `devices=N` devices, else as many as the captured mesh had."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import kernels_multi  # noqa: F401  (registers the multi-device catalog)
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P
from kernels import CATALOG

import pallaslab
from pallaslab.cli import main
from pallaslab.lowering import get_target, slices
from pallaslab.model.kernel import MeshInfo

ROOT = Path(__file__).resolve().parents[2]
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason='needs libtpu: pip install "pallaslab[tpu]"')


def ring(devices=None, **options):
    fn, args = CATALOG["ring_all_gather"].case()
    (k,) = pallaslab.lower(fn, *args, target="tpu-v5e", compile=True, devices=devices,
                           **options).kernels
    return k


def mesh_note(k):
    (note,) = [d for d in k.diagnostics if d.code == "shard-map-mesh"]
    return note


@needs_libtpu
def test_ring_all_gather_compiles_over_the_four_chips_of_v5e_2x2():
    k = ring(devices=4)
    assert k.ok and k.compiled, k.diagnostics
    mosaic = k.stage("mosaic").text  # the remote copy stays shown
    assert "tpu.enqueue_dma" in mosaic and "device_id(" in mosaic
    assert any(s.startswith("mosaic:") for s in k.stage_names)
    note = mesh_note(k)
    assert note.severity == "info"
    assert (note.get("topology"), note.get("devices"), note.get("mesh")) == ("v5e:2x2", 4, "x=4")
    assert note.message.startswith(
        f"kernel {k.name!r} runs inside shard_map (mesh x=1 as captured): it is compiled by "
        "libtpu inside shard_map over mesh x=4: one SPMD program of 4 partitions, for all 4 "
        "devices of the libtpu topology v5e:2x2")
    # captured here on one device: the note says the body keeps that mesh's axis sizes
    assert "Its body is the one traced in mesh x=1" in note.message


@needs_libtpu
def test_the_cli_traces_a_ring_on_four_devices_and_compiles_over_four_chips(tmp_path):
    """`pallaslab lower --devices 4` gives its own JAX 4 CPU devices before the case is
    traced: the ring is captured for 4 and compiled as 4 chips run it (its (4, 8, 128)
    gathered output), not a ring of one spread over 4."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PALLASLAB_CACHE_DIR": str(tmp_path)}
    env.pop("XLA_FLAGS", None)
    out = subprocess.run(
        [sys.executable, "-m", "pallaslab", "lower", "tests/kernels_multi.py:ring_all_gather",
         "--target", "tpu-v5e", "--compile", "--devices", "4", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (k,) = json.loads(out.stdout)["kernels"]
    assert k["ok"] and k["compiled"]
    (note,) = [d for d in k["diagnostics"] if d["code"] == "shard-map-mesh"]
    assert note["topology"] == "v5e:2x2" and note["devices"] == 4
    assert note["message"].startswith(
        f"kernel {k['name']!r} runs inside shard_map (mesh x=4 as captured): it is compiled by "
        "libtpu inside shard_map over mesh x=4")
    assert "Its body is the one traced" not in note["message"]
    mosaic = next(s["text"] for s in k["stages"] if s["name"] == "mosaic")
    assert "memref<4x8x128xf32" in mosaic


@needs_libtpu
def test_the_cli_takes_devices(capsys):
    status = main(["lower", "tests/kernels_multi.py:right_permute", "--target", "tpu-v5e",
                   "--compile", "--devices", "4", "--json"])
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert status == 0 and k["ok"] and k["compiled"]
    (note,) = [d for d in k["diagnostics"] if d["code"] == "shard-map-mesh"]
    assert (note["topology"], note["devices"]) == ("v5e:2x2", 4)


@needs_libtpu
def test_captured_on_one_device_it_still_compiles_for_one_chip():
    note = mesh_note(k := ring())
    assert k.ok and k.compiled
    assert (note.get("topology"), note.get("devices")) == ("v5e:1x1", 1)
    assert "pass devices=N to compile it over N chips" in note.message


@needs_libtpu
def test_more_devices_than_any_topology_falls_back_to_one_chip_and_says_why():
    k = ring(devices=512)
    assert k.ok and k.compiled
    note = mesh_note(k)
    assert note.severity == "warning" and note.get("topology") == "v5e:1x1"
    assert "(no libtpu topology of tpu-v5e has 512 devices (known: v5e:1x1, " in note.message


def _vmem_hungry_body(x_ref, o_ref, big_ref, local_sem, send_sem, recv_sem):
    right = jax.lax.rem(jax.lax.axis_index("x") + 1, jax.lax.axis_size("x"))
    local = pltpu.make_async_copy(x_ref, big_ref.at[pl.ds(0, 8)], local_sem)
    local.start()
    local.wait()
    remote = pltpu.make_async_remote_copy(big_ref.at[pl.ds(0, 8)], o_ref, send_sem, recv_sem,
                                          device_id=(right,))
    remote.start()
    remote.wait()


def _vmem_hungry(x):
    """A right permute through a 32 MiB VMEM buffer: over v5e's 16 MiB scoped default."""
    mesh = jax.make_mesh((jax.device_count(),), ("x",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    any_space = pl.BlockSpec(memory_space=pl.ANY)

    def kernel(shard):
        return pl.pallas_call(
            _vmem_hungry_body, out_shape=jax.ShapeDtypeStruct(shard.shape, shard.dtype),
            in_specs=[any_space], out_specs=any_space,
            scratch_shapes=[pltpu.VMEM((65536, 128), jnp.float32), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA])(shard)

    return jax.shard_map(kernel, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(x)


@needs_libtpu
def test_a_kernel_libtpu_rejects_over_four_chips_gets_the_compilers_words():
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    (k,) = pallaslab.lower(_vmem_hungry, x, target="tpu-v5e", compile=True, devices=4).kernels
    assert not k.ok and k.compiled
    (oom,) = k.errors
    assert oom.code == "vmem-oom" and oom.get("needed_bytes") == 32 * 2**20
    assert "on tpu-v5e (4 devices of v5e:2x2), but the limit is 16 MiB" in oom.message
    assert oom.message.endswith("Compiler: Scoped allocation with size 32.00M and limit 16.00M "
                                "exceeded scoped vmem limit by 16.00M.")
    assert "compiled by libtpu (which rejects it, see below) inside shard_map over mesh " \
           "x=4" in mesh_note(k).message


@needs_libtpu
def test_a_single_device_kernel_is_unaffected_by_devices():
    fn, args = CATALOG["matmul_f32"].case()
    plain = pallaslab.lower(fn, *args, target="tpu-v5e", compile=True)
    asked = pallaslab.lower(fn, *args, target="tpu-v5e", compile=True, devices=4)
    assert asked.ok and asked[0].compiled and asked[0].cached  # the same lowering, cached
    assert asked[0].stage_names == plain[0].stage_names
    assert not [d for d in asked[0].diagnostics if d.code == "shard-map-mesh"]


@pytest.mark.parametrize(("target", "devices", "topology", "of"), [
    ("tpu-v5e", 4, "v5e:2x2", 4), ("tpu-v6e", 8, "v6e:2x4", 8), ("tpu-v5e", 3, "v5e:2x2", 4),
    ("tpu-v4", 4, "v4:2x2x1", 8),  # v4's devices are TensorCores, two per chip
    ("tpu-7x", 4, "tpu7x:1x1x2", 4), ("tpu-v5p", 16, "v5p:2x2x4", 16)])
def test_the_topology_is_the_smallest_of_the_chip_with_that_many_devices(target, devices,
                                                                          topology, of):
    fn, args = CATALOG["ring_all_gather"].case()
    (k,) = pallaslab.capture(fn, *args)
    where = slices.plan(k, get_target(target), devices)
    assert where is not None
    assert (where.topology, where.partitions, where.topology_devices) == (topology, devices, of)


def test_devices_must_be_a_positive_int_and_leave_other_meshes_alone():
    fn, args = CATALOG["ring_all_gather"].case()
    (k,) = pallaslab.capture(fn, *args)
    with pytest.raises(slices.DevicesValueError, match="devices=0"):
        pallaslab.lower(k, target="tpu-v5e", devices=0)
    assert slices.plan(k, get_target("gpu-h100"), 4) is None
    two_axes = dataclasses.replace(k, device_mesh=MeshInfo("shard_map", (("x", 2), ("y", 2))))
    where = slices.plan(two_axes, get_target("tpu-v5e"), 8)
    assert where is not None and where.axes == (("x", 2), ("y", 2))
    assert where.fallback is not None and "devices=8 was not applied" in where.fallback
