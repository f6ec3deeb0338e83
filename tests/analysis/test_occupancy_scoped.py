"""Scoped VMEM of what a kernel body allocates, against libtpu's exact need (issue 40).

- sibling `run_scoped` regions (one after the other) are alive one at a time: the estimate is
  the most any one needs, a region nested in another adds to it;
- a nested `emit_pipeline` given its buffers (`allocations=`, made by a `run_scoped`, as
  tokamax's linear-softmax-cross-entropy backward does) allocates none of its own: its
  buffers are counted once, as the `run_scoped` ones.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import pallaslab
from pallaslab.analysis.occupancy import occupancy

MiB = 1 << 20
ANY = pl.BlockSpec(memory_space=pl.ANY)
TOLERANCE = 0.05  # as tests/analysis/test_vmem_fidelity.py
GRANULARITY = 256


def _siblings(x_hbm, o_hbm):
    def first(buf):  # 2 MiB
        pltpu.sync_copy(x_hbm, buf)
        buf[...] = buf[...] + 1.0
        pltpu.sync_copy(buf, o_hbm)

    def second(buf):  # 1 MiB
        pltpu.sync_copy(x_hbm.at[pl.ds(0, 512)], buf)
        buf[...] = buf[...] * 2.0
        pltpu.sync_copy(buf, o_hbm.at[pl.ds(0, 512)])

    pl.run_scoped(first, pltpu.VMEM((1024, 512), jnp.float32))
    pl.run_scoped(second, pltpu.VMEM((512, 512), jnp.float32))


def _nested(x_hbm, o_hbm):
    def outer(a):  # 1 MiB, alive while `inner` (1 MiB) is
        pltpu.sync_copy(x_hbm.at[pl.ds(0, 512)], a)

        def inner(b):
            pltpu.sync_copy(x_hbm.at[pl.ds(512, 512)], b)
            a[...] = a[...] + b[...]

        pl.run_scoped(inner, pltpu.VMEM((512, 512), jnp.float32))
        pltpu.sync_copy(a, o_hbm.at[pl.ds(0, 512)])

    def after(c):  # 1.5 MiB, after both
        pltpu.sync_copy(x_hbm.at[pl.ds(0, 768)], c)
        c[...] = c[...] * 3.0
        pltpu.sync_copy(c, o_hbm.at[pl.ds(0, 768)])

    pl.run_scoped(outer, pltpu.VMEM((512, 512), jnp.float32))
    pl.run_scoped(after, pltpu.VMEM((768, 512), jnp.float32))


def _call(body):
    def fn(x):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[ANY], out_specs=ANY)(x)
    return fn, (jnp.asarray(np.ones((1024, 512), np.float32)),)


BLOCK = (256, 512)


def _preallocated(x_hbm, o_hbm):
    spec = pl.BlockSpec(BLOCK, lambda i: (i, 0))

    def inner(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def run(allocations):
        pltpu.emit_pipeline(inner, grid=(4,), in_specs=[spec], out_specs=[spec])(
            x_hbm, o_hbm, allocations=allocations)

    pl.run_scoped(run, [pltpu.BufferedRef.input(spec, jnp.float32),
                        pltpu.BufferedRef.output(spec, jnp.float32)])


CASES = {"siblings": (_siblings, 2 * MiB), "nested": (_nested, 2 * MiB)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sequential_run_scoped_regions_share_their_memory(name):
    body, expected = CASES[name]
    fn, args = _call(body)
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    summed = sum(o.bytes for o in occ.operands if o.space == "vmem")
    assert summed > expected  # what counting them all at once would say
    assert (occ.bytes, occ.scoped_shared) == (expected, summed - expected)
    assert "sequential run_scoped regions reuse" in str(occ)


def _preallocated_case():
    return _call(_preallocated)


def test_a_pipeline_given_its_buffers_allocates_none_of_its_own():
    fn, args = _preallocated_case()
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    one = BLOCK[0] * BLOCK[1] * 4  # 512 KiB
    pipeline = [o for o in occ.operands if o.origin.startswith("pipelines[")]
    assert pipeline and all(o.bytes == 0 for o in pipeline)
    assert occ.bytes == 2 * 2 * one  # the run_scoped buffers: two slots of each block
    assert occ.semaphores == sum(o.bytes for o in occ.operands if o.space == "semaphore")


@pytest.fixture(scope="module")
def libtpu_needs():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip('needs libtpu: pip install "pallaslab[tpu]"')
    out = {}
    for name, (body, _) in CASES.items():
        fn, args = _call(body)
        (kernel,) = pallaslab.lower(fn, *args, target="tpu-v5e", vmem_exact=True).kernels
        out[name] = kernel.resources.vmem_bytes
    fn, args = _preallocated_case()
    (kernel,) = pallaslab.lower(fn, *args, target="tpu-v5e", vmem_exact=True).kernels
    out["preallocated"] = kernel.resources.vmem_bytes
    return out


@pytest.mark.tpu_compiler
@pytest.mark.parametrize("name", [*sorted(CASES), "preallocated"])
def test_the_estimate_matches_libtpus_exact_need(libtpu_needs, name):
    fn, args = _preallocated_case() if name == "preallocated" else _call(CASES[name][0])
    occ = occupancy(pallaslab.capture(fn, *args)[0], "v5e")
    truth = libtpu_needs[name]
    assert truth, f"{name}: libtpu's need was not measured"
    report = (f"{name}: estimate {occ.bytes / 1024:.1f} KiB, libtpu needs "
              f"{truth / 1024:.1f} KiB")
    assert truth <= occ.bytes + GRANULARITY, report  # never below what libtpu needs
    assert abs(occ.bytes - truth) <= max(TOLERANCE * truth, GRANULARITY), report


def test_the_memory_view_says_what_the_regions_share():
    # the operand rows add up to more than the total: the table says by how much, and why
    fn, args = _call(_siblings)
    view = pallaslab.inspect(fn, *args).memory(chips="v5e")
    (chip,) = view.payload()["chips"]
    assert chip["shared"] > 0 and chip["bytes"] == 2 * MiB
    row = next(line for line in view.to_text().splitlines() if "shared by sequential" in line)
    assert row.split()[-1] == f"-{chip['shared']:,}"
    assert "shared by sequential run_scoped regions" in view.to_html()
