"""Lowering TPU kernels beyond BlockSpecs (tests/kernels_tpu.py, tag "tpu-advanced") from a
CPU host, each for its target's own chip: in-kernel pipelines, manual DMAs, run_scoped buffers,
semaphores, mesh kernels, SparseCore, the fuser; compiled with libtpu.

Each kernel is lowered and compiled once per target (module-scoped), through the on-disk
lowering cache, so a warm run takes seconds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from kernels import CATALOG, catalog_names

import pallaslab
from pallaslab import lowering
from pallaslab.lowering.diagnostics import LoweringContextError
from pallaslab.lowering.targets import Target, get_target

pytestmark = pytest.mark.tpu_compiler

ADVANCED = catalog_names(tag="tpu-advanced")
TARGETS = ("tpu-v5e", "tpu-v6e")
# What Mosaic TPU rightly refuses, with its own words and the code of the finding that
# predicts it (the operand is named from the capture).
REJECTED = {
    "buffered_three": ("tpu-buffer-count", "args[0]", "LoweringException: Only single (1) and "
                       "double (2) buffering are supported. Got 3."),
    "mixed_element_blocked": ("tpu-mixed-element", "args[0]", "NotImplementedError: All block "
                              "dimensions must be Elements or none of them can be Elements."),
}
# SparseCore kernels need a chip with SparseCores (v5p, v6e, 7x): v5e has none.
NO_SPARSECORE = {("sparsecore_vector_add", "tpu-v5e")}
# libtpu compiles these but writes no TensorCore Mosaic pass dump to read VMEM from: the
# core_map inside run_state (no dump at all), the SparseCore kernel (an SC module).
NO_TC_DUMP = {"core_map_kernel", "sparsecore_vector_add"}


def _case(name):
    fn, args, *rest = CATALOG[name].case()
    return fn, args, (rest[0] if rest else {})


@pytest.fixture(scope="module")
def matrix():
    """(kernel, target) -> LoweringResult, lowered and compiled with libtpu once."""
    out = {}
    for name in ADVANCED:
        fn, args, kwargs = _case(name)
        for target in TARGETS:
            out[name, target] = pallaslab.lower(fn, *args, target=target, compile=True,
                                                **kwargs)
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", [n for n in ADVANCED if n not in REJECTED])
def test_advanced_kernel_lowers_and_compiles(matrix, name, target):
    result = matrix[name, target]
    assert result.target == target and len(result) >= 1
    if (name, target) in NO_SPARSECORE:
        (k,) = result.kernels
        (d,) = k.errors
        assert not k.ok and d.code == "unsupported-target"
        assert "SparseCore is not available on the current device (v5e)" in d.message
        (note,) = [d for d in k.diagnostics if d.severity == "warning"]
        assert (note.code, note.message) == ("traced-for-other-chip", (
            "fn(...) could not be traced for tpu-v5e's chip (RuntimeError: The current TPU "
            "does not have SparseCores); its kernels are lowered as traced for 7x."))
        return
    for k in result:
        assert k.backend == "mosaic-tpu"
        assert k.ok and k.compiled, (name, target, k.diagnostics)
        assert not k.errors
        assert k.stage_names[:2] == ("jaxpr", "mosaic")
        assert "func.func @" in k.stage("mosaic").text
        if name not in NO_TC_DUMP:
            assert k.stage_names[-1] == "mosaic:post-finalize-llo"  # libtpu's passes ran
            assert k.resources.vmem_bytes is not None


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(REJECTED))
def test_compiler_rejections_keep_their_words_and_codes(matrix, name, target):
    code, operand, words = REJECTED[name]
    (k,) = matrix[name, target].kernels
    (d,) = k.errors
    assert not k.ok and not k.compiled
    assert (d.code, d.operand) == (code, operand)
    assert d.message == f"{operand}: Mosaic TPU could not lower kernel '_double': {words}"


@pytest.mark.parametrize(("name", "kib"), [("run_scoped_sync_copy", 64),
                                         ("emit_pipeline_matmul", 384)])
def test_buffers_the_body_allocates_count_in_vmem(matrix, name, kib):
    """run_scoped / emit_pipeline buffers live inside the body (`llo.alloca_vmem`), not in
    the signature; both figures are the smallest vmem_limit_bytes libtpu accepts (measured
    with vmem_exact): one 128x128 f32 buffer, and 3 operands x 2 buffers of 128x128 f32.
    On 7x the compiler places small ANY operands in VMEM itself, outside scoped VMEM."""
    for target in TARGETS:
        (k,) = matrix[name, target].kernels
        assert k.resources.vmem_bytes == kib * 1024, target
    fn, args, _ = _case(name)
    (k,) = lowering.lower(fn, *args, target="tpu-7x", compile=True).kernels
    assert "unspecified_memory_space" in k.stages[-1].text
    assert k.resources.vmem_bytes == kib * 1024


def test_every_tpu_target_lowers_run_scoped_sync_copy():
    fn, args, _ = _case("run_scoped_sync_copy")
    cap = pallaslab.capture(fn, *args)
    for target in lowering.TPU_TARGETS:
        (k,) = lowering.lower(cap, target=target.name).kernels
        assert k.ok, (target.name, k.diagnostics)
        mosaic = k.stage("mosaic").text
        assert "tpu.sem_alloc" in mosaic and "tpu.enqueue_dma" in mosaic, target.name


def _top_k_bf16(x):
    """Mosaic lowers a bf16 top_k for TPU v6 and newer only: the lowered module depends on
    which chip the lowering is told it is."""

    def body(x_ref, o_ref):
        o_ref[...] = jax.lax.top_k(x_ref[...], 128, is_stable=False)[0]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_lowered_for_the_target_chip_not_the_one_the_user_traced_under():
    x = jax.ShapeDtypeStruct((8, 128), jnp.bfloat16)
    with jax.sharding.use_abstract_mesh(_abstract_mesh("TPU v5 lite")):
        traced_under_v5e = pallaslab.capture(_top_k_bf16, x)
    (v6e,) = lowering.lower(traced_under_v5e, target="tpu-v6e", use_cache=False).kernels
    assert v6e.ok, v6e.diagnostics
    with jax.sharding.use_abstract_mesh(_abstract_mesh("TPU v6 lite")):
        traced_under_v6e = pallaslab.capture(_top_k_bf16, x)
    (v5e,) = lowering.lower(traced_under_v6e, target="tpu-v5e", use_cache=False).kernels
    (d,) = v5e.errors
    assert d.message == ("Mosaic TPU could not lower kernel 'body': NotImplementedError: "
                         "bfloat16 top_k is not supported on TPUv5 or older")


def _abstract_mesh(device_kind, num_cores=1):
    from jax.sharding import AbstractDevice, AbstractMesh, AxisType

    device = AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="tpu")
    return AbstractMesh((1,), ("x",), (AxisType.Auto,), abstract_device=device)


@pytest.mark.parametrize("target", ["tpu-v5p", "tpu-v6e", "tpu-7x"])
def test_chip_dependent_trace_is_redone_for_the_target(target):
    """A mesh kernel with the default core count, captured for v5e (one core), is lowered as
    traced for the target: its Mosaic module is the one a trace under that chip gives."""
    fn, args, _ = _case("mesh_kernel_default_cores")
    cap = pallaslab.capture(fn, *args)  # traced for v5e on this CPU host
    assert cap.kernels[0].traced_for_chip == "v5e"
    tgt = get_target(target)
    (k,) = lowering.lower(cap, target=target, use_cache=False).kernels
    (direct,) = lowering.lower(pallaslab.capture(fn, *args, chip=tgt.chip), target=target,
                               use_cache=False).kernels
    assert k.ok and direct.ok
    assert k.stage("mosaic").text == direct.stage("mosaic").text
    assert f"iteration_bounds = array<i64: {tgt.cores}>" in k.stage("mosaic").text


def test_a_lone_kernel_traced_for_another_chip_is_lowered_as_traced_and_says_so():
    fn, args, _ = _case("mesh_kernel_default_cores")
    (kernel,) = pallaslab.capture(fn, *args).kernels
    (k,) = lowering.lower(kernel, target="tpu-v5p", use_cache=False).kernels
    assert k.ok and "iteration_bounds = array<i64: 1>" in k.stage("mosaic").text
    (note,) = k.diagnostics
    assert (note.severity, note.code) == ("warning", "traced-for-other-chip")
    assert note.message == (
        "kernel traced for v5e, lowered as traced: a Kernel alone cannot be traced again for "
        "tpu-v5p's chip; pass its Capture (or the function and its arguments) to lower what "
        "that chip runs.")


def test_targets_lower_for_the_cores_libtpu_compiles_for():
    from pallaslab.model import _jax

    for target in lowering.TPU_TARGETS:
        assert target.topology is not None
        assert _jax.tpu_topology_device(target.topology).num_cores == target.cores, target.name


def test_a_missing_device_context_is_a_tool_error_not_a_verdict():
    fn, args, _ = _case("run_scoped_sync_copy")
    unknown = Target("tpu-unknown", "tpu", "TPU v99", "v99:1x1", "v99")
    with pytest.raises(LoweringContextError) as err:
        lowering.lower(pallaslab.capture(fn, *args), target=unknown, use_cache=False)
    assert str(err.value).startswith(
        "pallaslab failed to lower kernel '_scoped_increment' for tpu-unknown: it did not "
        "supply the device context Pallas asked for (the target's abstract device). This is "
        "a pallaslab error, not a verdict on the kernel. Pallas said: ValueError: Unsupported "
        "TPU device kind: TPU v99.")
