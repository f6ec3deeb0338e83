"""Kernels joined by DMA semaphores compile together (issue 24): a DMA started in one
pallas_call and waited in the next passes its semaphore (and the buffer it writes) between
them. libtpu aborts on such a semaphore as a program's output or input, so compiling each
kernel alone gave a false `compiler-crash`; `jax.jit(f).lower(...).compile()` of the same call
compiles them in one program and succeeds, and so must `lower --compile`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import kernels_run_verdicts
import pytest

import pallaslab
from pallaslab.lowering import get_target
from pallaslab.lowering.api import semaphore_groups
from pallaslab.model import capture

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peer"))
import tpu_async  # tests/peer on the path above: it imports its registry

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason='needs libtpu: pip install "pallaslab[tpu]"')
V5E = get_target("tpu-v5e")


def _compiled(case):
    fn, args = case()
    return pallaslab.lower(fn, *args, target="tpu-v5e", compile=True).kernels


def _group_of(kernel):
    (note,) = [d for d in kernel.diagnostics if d.code == "semaphore-group"]
    return note.get("group")


def test_groups_join_only_kernels_that_pass_a_semaphore():
    # two copies: x flows from the first start to the second (no semaphore), each semaphore
    # from its start to its own wait
    fn, args = tpu_async.multiple_async_copy()
    groups = semaphore_groups(capture(fn, *args).kernels, V5E)
    assert {i: g.indexes for i, g in groups.items()} == {0: (0, 2), 2: (0, 2), 1: (1, 3),
                                                         3: (1, 3)}


def test_no_group_without_a_semaphore_between_kernels_or_for_gpu():
    fn, args = tpu_async.basic_async_copy()
    kernels = capture(fn, *args).kernels
    assert semaphore_groups(kernels, get_target("gpu-h100")) == {}
    assert semaphore_groups(kernels[:1], V5E) == {}


@pytest.mark.tpu_compiler
@needs_libtpu
def test_basic_async_copy_compiles_as_jax_compiles_it():
    start, done = _compiled(tpu_async.basic_async_copy)
    for k in (start, done):
        assert k.ok and k.compiled, k.diagnostics
        assert not k.errors
        assert _group_of(k) == [0, 1]
        assert k.stage_names[-1] == "mosaic:post-finalize-llo"
        assert k.resources.vmem_bytes == 0  # both operands stay in HBM (pl.ANY)
    # each kernel its own pass pipeline out of the one program
    assert start.stage("mosaic:original").text != done.stage("mosaic:original").text


@pytest.mark.tpu_compiler
@needs_libtpu
def test_scalar_prefetch_async_copy_compiles_with_its_smem():
    start, wait = _compiled(kernels_run_verdicts.async_copy_prefetch)
    assert start.ok and wait.ok and start.compiled and wait.compiled
    assert _group_of(start) == _group_of(wait) == [0, 1]
    assert start.resources.smem_bytes == 512  # the prefetched index, in the start kernel only
    assert wait.resources.smem_bytes == 0


@pytest.mark.tpu_compiler
@needs_libtpu
def test_identical_groups_each_name_their_own_kernels():
    # kernels 2 and 3 are the same kernel in the same kind of group, so the second is a cache
    # hit of the first: the note on which kernels were compiled together must still be its own
    kernels = _compiled(tpu_async.multiple_async_copy)
    assert all(k.ok for k in kernels)
    assert [_group_of(k) for k in kernels] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert kernels[3].cached


@pytest.mark.tpu_compiler
def test_the_lowering_tab_compiles_a_semaphore_joined_kernel_with_its_group():
    from pallaslab.views.context import KernelContext
    from pallaslab.views.lowering import LoweringView

    fn, args = tpu_async.basic_async_copy()[:2]
    cap = pallaslab.capture(fn, *args)
    for kernel in cap:
        result = LoweringView(KernelContext(kernel, cap), compile=True).result("tpu-v5e")
        assert result.ok, [d.message for d in result.diagnostics]
        assert "semaphore-group" in [d.code for d in result.diagnostics]
