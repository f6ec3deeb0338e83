"""Cross-lowering: a captured kernel -> Mosaic TPU / Triton / Mosaic GPU IR, with no device.

JAX lowers for a platform it has no device for when an abstract mesh says which device kind
to assume (`jax.sharding.use_abstract_mesh`), and `lower(lowering_platforms=...)` names the
platform. The kernel is bound alone, with its operand avals. Its body's equations carry the
device context they were traced under (none on a CPU host, or the user's chip), which Pallas's
rules re-enter while lowering; so the body is re-stamped with the target's abstract device
first (`kernel_callable_for_device`), never the capture's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import warnings
from typing import Any

import jax
from jax.sharding import AbstractDevice, AbstractMesh, AxisType

from pallaslab.errors import missing
from pallaslab.lowering import diagnostics, irtext, params, slices
from pallaslab.lowering.result import Diagnostic, Stage
from pallaslab.lowering.slices import Slice
from pallaslab.lowering.targets import Target
from pallaslab.model import Kernel, _jax
from pallaslab.model._jax import lowering as _jax_lowering


@dataclasses.dataclass(frozen=True)
class CrossLowered:
    backend: str  # "mosaic-tpu" | "triton" | "mosaic-gpu"
    ok: bool
    stages: tuple[Stage, ...]
    diagnostics: tuple[Diagnostic, ...]
    hlo: str | None = None  # lowered StableHLO of the kernel alone (what libtpu compiles)
    ttir: str | None = None  # the Triton module as the custom call carries it (valid MLIR)
    slice: Slice | None = None  # inside shard_map: the devices `hlo` is partitioned over


def abstract_device(target: Target) -> AbstractDevice:
    return AbstractDevice(device_kind=target.device_kind, num_cores=target.cores,
                          platform=target.platform)


def abstract_mesh(target: Target) -> AbstractMesh:
    return AbstractMesh((1,), ("x",), (AxisType.Explicit,),
                        abstract_device=abstract_device(target))


def cross_lower(kernel: Kernel, target: Target, *, vmem_limit_bytes: int | None = None,
                devices: int | None = None) -> CrossLowered:
    """`devices`: for a kernel captured inside shard_map, lower it for that many TPU devices
    (default: as many as its mesh had), see `lowering.slices`."""
    backend = params.lowering_backend(kernel, target)
    where = slices.plan(kernel, target, devices)
    jaxpr_stage = Stage("jaxpr", *irtext.jaxpr_with_sources(
        _jax.kernel_jaxpr_with_source_info(kernel)))
    if (wrong := params.wrong_backend(kernel, target)) is not None:
        return CrossLowered(backend, False, (jaxpr_stage,), (wrong,))
    if backend == "mosaic-gpu" and not _importable("absl"):
        raise missing("Lowering Mosaic GPU kernels (plgpu.kernel)", "absl-py", "gpu")
    compiler_params, notes = params.compiler_params_for(kernel, target, vmem_limit_bytes)
    overrides: dict[str, Any] = {"debug": target.platform == "gpu", "interpret": False}
    if compiler_params is not None:
        overrides["compiler_params"] = compiler_params
    try:
        hlo, printed, triton_modules = _lower(kernel, target, overrides, where)
    except Exception as err:  # Pallas's verdict on this kernel for this backend
        if (tool_error := diagnostics.context_error(err, kernel.name, target.name)) is not None:
            raise tool_error from err
        diag = diagnostics.from_lowering_error(err, kernel.name, _BACKEND_NAMES[backend],
                                               _pipeline_suspects(kernel))
        return CrossLowered(backend, False, (jaxpr_stage,), (*notes, diag))
    if backend == "mosaic-tpu":
        stages = _mosaic_tpu_stages(hlo)
        if where is not None:
            notes = (*notes, slices.note(kernel, target, where))
        return CrossLowered(backend, True, (jaxpr_stage, *stages), notes, hlo=hlo,
                            slice=where)
    sections = irtext.debug_sections(printed)
    if backend == "triton":
        module = sections.get("Triton module", "")
        text, sources = irtext.pretty_ir_with_sources(module)
        return CrossLowered(backend, True, (jaxpr_stage, Stage("ttir", text, sources)), notes,
                            ttir=triton_modules[0] if triton_modules else None)
    module = sections.get("Mosaic GPU module", "")
    text, sources = irtext.pretty_ir_with_sources(module)
    return CrossLowered(backend, True, (jaxpr_stage, Stage("mosaic-gpu", text, sources)), notes)


_BACKEND_NAMES = {"mosaic-tpu": "Mosaic TPU", "triton": "Triton", "mosaic-gpu": "Mosaic GPU"}


def _lower(kernel: Kernel, target: Target, overrides: dict[str, Any], where: Slice | None
           ) -> tuple[str, str, list[str]]:
    """(StableHLO text for TPU, what the lowering printed, the Triton modules to compile):
    prints never reach the user's stdout."""
    call = _jax_lowering.kernel_callable_for_device(kernel, abstract_device(target),
                                           **_supported(kernel, overrides))
    avals = _jax.kernel_call_avals(kernel)
    printed = io.StringIO()
    call, context = _in_shard_map(target, call, where)
    with contextlib.redirect_stdout(printed), warnings.catch_warnings(), context:
        warnings.simplefilter("ignore")  # e.g. "the Triton backend is deprecated"
        lowered = jax.jit(call).trace(*avals).lower(
            lowering_platforms=(target.lowering_platform,))
        hlo = lowered.as_text() if target.platform == "tpu" else ""
        triton = _jax_lowering.triton_module_texts(lowered.compiler_ir("stablehlo")) \
            if target.platform == "gpu" else []
    return hlo, printed.getvalue(), triton


def _in_shard_map(target: Target, call: Any, where: Slice | None) -> tuple[Any, Any]:
    """(the kernel's callable, the abstract mesh to lower it under). A kernel captured inside
    shard_map is lowered inside one again: Pallas lowers remote DMAs and device semaphores only
    within a shard_map, from its mesh's axis names and sizes. An abstract mesh of the slice's
    axes (the target's device kind, no device here) gives StableHLO with one partition per
    device, which the compiler worker compiles over the topology's devices. Its operands are
    the per-device blocks, replicated; the rest: the target's abstract mesh of one device."""
    if where is None:
        return call, jax.sharding.use_abstract_mesh(abstract_mesh(target))
    names = tuple(name for name, _ in where.axes)
    mesh = AbstractMesh(tuple(size for _, size in where.axes), names,
                        (AxisType.Explicit,) * len(names),
                        abstract_device=abstract_device(target))
    spec = jax.sharding.PartitionSpec()
    return (jax.shard_map(call, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False),
            jax.sharding.use_abstract_mesh(mesh))


def _pipeline_suspects(kernel: Kernel) -> dict[str, str | None]:
    """The first operand Mosaic's pipeline rejects, per diagnostic code: more than two
    buffers, or `pl.Element` dimensions mixed with blocked ones."""
    buffers = [op.origin for op in kernel.operands if (op.buffer_count or 0) > 2]
    mixed = [op.origin for op in kernel.operands if op.block_dims is not None
             and len({d.kind == "element" for d in op.block_dims if not d.squeezed}) > 1]
    return {"tpu-buffer-count": next(iter(buffers), None),
            "tpu-mixed-element": next(iter(mixed), None)}


def _supported(kernel: Kernel, overrides: dict[str, Any]) -> dict[str, Any]:
    """Mesh kernels have no `compiler_params` override from us; keep only known params."""
    try:
        _jax.kernel_callable(kernel, **overrides)
    except TypeError:
        return {k: v for k, v in overrides.items() if k in ("debug", "interpret")}
    return overrides


def _mosaic_tpu_stages(hlo: str) -> tuple[Stage, ...]:
    configs = irtext.tpu_custom_call_configs(hlo)
    stages = []
    for i, config in enumerate(configs):
        body = irtext.config_bytes(config, "body")
        if body is None:
            continue
        tagged, locs = _jax.mosaic_tpu_module(body, irtext.config_bytes(config, "debug_locations"))
        text, sources = irtext.mosaic_with_sources(tagged, locs)
        stages.append(Stage("mosaic" if i == 0 else f"mosaic[{i}]", text, sources))
    return tuple(stages)


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
