"""One kernel's inspection (tiling + findings) and its stable JSON form (`inspect --json`)."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pallaslab.analysis.dma_waits import unwaited_passed_dma_findings
from pallaslab.analysis.findings import Finding, Rules, find
from pallaslab.analysis.occupancy import (
    DEFAULT_CHIPS,
    allocated_buffers,
    applies,
    vmem_section,
)
from pallaslab.analysis.tiling import Tiling, tile
from pallaslab.analysis.vmem_findings import vmem_findings
from pallaslab.model import Capture, DmaCopy, Kernel, MeshInfo
from pallaslab.model.source_names import short_source
from pallaslab.util.names import ref_name

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KernelInspection:
    kernel: Kernel
    tiling: Tiling | None
    findings: tuple[Finding, ...]
    vmem: dict[str, Any] = dataclasses.field(default_factory=dict)  # per TPU chip

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")


def inspect_kernel(
    kernel: Kernel, *, backend: str | None = None, chips: Sequence[str] = DEFAULT_CHIPS
) -> KernelInspection:
    """Tiling, findings and (for TPU kernels) VMEM occupancy on `chips` ("v5e", "v6e", ...)."""
    tiling = tile(kernel)
    findings = find(kernel, tiling, backend=backend)
    vmem: dict[str, Any] = {}
    rules = Rules.for_kernel(kernel, backend)
    if rules.tpu and chips:
        vmem = vmem_section(kernel, chips)
        findings += tuple(rules.judged(f) for f in vmem_findings(kernel, chips))
    return KernelInspection(kernel, tiling, findings, vmem)


def inspect_capture(
    cap: Capture, *, backend: str | None = None, chips: Sequence[str] = DEFAULT_CHIPS
) -> tuple[KernelInspection, ...]:
    kernels = tuple(cap)
    passed = unwaited_passed_dma_findings(kernels)  # across kernels: a semaphore passed on
    return tuple(_with(inspect_kernel(k, backend=backend, chips=chips), extra)
                 for k, extra in zip(kernels, passed, strict=True))


def inspect_in_capture(cap: Capture, kernel: Kernel, *, backend: str | None = None,
                       chips: Sequence[str] = DEFAULT_CHIPS) -> KernelInspection:
    """`inspect_kernel`, with the findings only the whole call shows (a copy on a semaphore
    the kernel passes on that no later kernel waits): one kernel's part of `inspect_capture`."""
    kernels = tuple(cap)
    passed = unwaited_passed_dma_findings(kernels)[kernels.index(kernel)]
    return _with(inspect_kernel(kernel, backend=backend, chips=chips), passed)


def _with(insp: KernelInspection, findings: tuple[Finding, ...]) -> KernelInspection:
    return dataclasses.replace(insp, findings=insp.findings + findings) if findings else insp


def kernel_json(insp: KernelInspection) -> dict[str, Any]:
    """The contract's per-kernel object (docs/architecture.md, `pallaslab inspect --json`).

    Per operand, `buffer_count` is what its pipeline mode asks for and `buffers` the VMEM
    slots the kernel really gets (1 for a constant index map or a single-step grid)."""
    k = insp.kernel
    used = allocated_buffers(k) if applies(k) else {}  # pipeline slots: a TPU notion
    return {
        "name": k.name,
        "source": _short_source(k.source),
        "call_site": _short_source(k.call_site),
        "kind": k.kind,
        "backend": k.backend,
        "context": list(k.context),
        "grid": [g if g is not None else None for g in k.grid],
        "programs": k.programs,
        "dimension_semantics": list(k.dimension_semantics) if k.dimension_semantics else None,
        "operands": [{**_operand_json(insp, op), "buffers": used.get(op.origin)}
                     for op in k.operands],
        "findings": [f.to_json() for f in insp.findings],
        "vmem": insp.vmem,
        "fusion": fusion_json(k),
        "traced_for_chip": k.traced_for_chip,
        "mesh": _mesh_json(k.mesh),
        "device_mesh": _mesh_json(k.device_mesh),  # inside shard_map: its mesh, as traced
        "communicates": k.communicates,
        "pipelines": [pipeline_json(p) for p in k.pipelines],
        "scoped": [_operand_json(None, op) for op in k.scoped],
        "dmas": [_dma_json(d) for d in k.dmas],
        "semaphore_ops": [{"kind": s.kind, "semaphore": s.semaphore,
                           "source": _short_source(s.source), "device": s.device,
                           "device_id": s.device_id}
                          for s in k.semaphore_ops],
    }


def _mesh_json(mesh: MeshInfo | None) -> dict[str, Any] | None:
    if mesh is None:
        return None
    return {"kind": mesh.kind, "axes": [[name, size] for name, size in mesh.axes],
            "warpgroups": list(mesh.warpgroups) if mesh.warpgroups else None}


def pipeline_json(pipeline: Kernel) -> dict[str, Any]:
    """A nested `emit_pipeline`: its own grid and operands (the kernel schema), each operand
    with `outer`, the enclosing kernel's ref it windows."""
    tiling = tile(pipeline)
    return {
        "name": pipeline.name,
        "source": _short_source(pipeline.source),
        "call_site": _short_source(pipeline.call_site),
        "grid": list(pipeline.grid),
        "programs": pipeline.programs,
        "dimension_semantics": list(pipeline.dimension_semantics)
        if pipeline.dimension_semantics else None,
        "operands": [{**_operand_json(tiling, op), "outer": op.outer}
                     for op in pipeline.operands],
    }


def _dma_json(d: DmaCopy) -> dict[str, Any]:
    return {"kind": d.kind, "src": d.src, "dst": d.dst,
            "src_memory_space": d.src_memory_space, "dst_memory_space": d.dst_memory_space,
            "shape": list(d.shape), "dtype": str(d.dtype), "bytes": d.nbytes,
            "semaphore": d.semaphore, "source": _short_source(d.source),
            "repeated": d.repeated, "device_id": d.device_id,
            "device_id_type": d.device_id_type}


def _operand_json(tiling: KernelInspection | Tiling | None, op: Any) -> dict[str, Any]:
    if isinstance(tiling, KernelInspection):
        tiling = tiling.tiling
    ot = tiling.operands.get(op.origin) if tiling is not None else None
    return {
        "origin": op.origin,
        "param": op.param,
        "role": op.role,
        "shape": list(op.shape),
        "dtype": op.element,
        "value_type": op.value_type,
        "block_shape": list(op.block_shape) if op.block_shape is not None else None,
        "memory_space": op.memory_space,
        "buffer_count": op.buffer_count,
        "fetches": ot.fetches if ot is not None else None,
        "hbm_bytes": ot.hbm_bytes if ot is not None else None,
        "scalar_prefetch": op.scalar_prefetch,
        "aliased_with": op.aliased_with,
    }


def fusion_json(kernel: Kernel) -> dict[str, Any] | None:
    """What `fuser.fuse` pulled into the kernel: its prologue/epilogue functions (jaxpr text,
    the operand each feeds or consumes, the user's lines) and the user's array behind each
    fused operand; None for a kernel the fuser did not build."""
    if kernel.fusion is None:
        return None
    return {
        "functions": [{"role": f.role, "operand": f.operand, "jaxpr": f.jaxpr,
                       "sources": [_short_source(s) for s in f.sources]}
                      for f in kernel.fusion.functions],
        "operand_arrays": dict(kernel.fusion.operand_arrays),
    }


def caller_names(cap: Capture | None, kernel: Kernel,
                 arg_names: Sequence[str] | None) -> dict[str, str]:
    """Input origin -> the caller's expression for it ("x", "w.T"), for inputs that are one of
    the call's arguments unchanged. Best effort: empty whenever the match is not certain.

    `arg_names` holds one expression per argument of the call, as the `%%pallas` magic reads
    them from the cell. Arguments holding no array were bound before tracing, so literal
    expressions (`128`, `True`) are dropped when the counts differ; an argument that is a pytree
    of several arrays names none of them.
    """
    if cap is None or not arg_names:
        return {}
    positions = cap.argument_positions(kernel)
    if not positions:
        return {}
    flat = cap.argument_names()
    n_flat = len(cap.handle.flat_args) if cap.handle is not None else 0
    names = [str(n) for n in arg_names]
    groups = _argument_groups(flat, n_flat)
    if len(groups) != len(names):
        names = [n for n in names if not _is_literal(n)]
    if len(groups) != len(names):
        return {}
    leaf_name: dict[int, str] = {}
    for group, name in zip(groups, names, strict=True):
        if len(group) == 1:
            leaf_name[group[0]] = name
    return {origin: leaf_name[pos] for origin, pos in positions.items() if pos in leaf_name}


_ROOT = re.compile(r"^(args\[\d+\]|[^\[.]+)")


def _argument_groups(flat: Sequence[str] | None, n_flat: int) -> list[list[int]]:
    """Flat argument positions grouped by the call argument they belong to (pytree leaves of
    one argument share its name's root: "p['a']", "p['b']")."""
    if flat is None or len(flat) != n_flat:
        return [[i] for i in range(n_flat)]
    groups: list[list[int]] = []
    last = None
    for i, name in enumerate(flat):
        m = _ROOT.match(name)
        root = m.group(1) if m else name
        if groups and root == last:
            groups[-1].append(i)
        else:
            groups.append([i])
        last = root
    return groups


def _is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def operand_labels(kernel: Kernel, callers: Mapping[str, str] | None = None) -> dict[str, str]:
    """Origin -> the name views show: "x_ref (args[0])", "x_ref (args[0] = x)" when the
    caller's expression is known, the origin alone when the kernel has no parameter names."""
    # The fuser's operands are the fused function's arrays: name them as the caller's are.
    fused = kernel.fusion.operand_arrays if kernel.fusion is not None else {}
    callers = {**fused, **(callers or {})}
    out = {}
    for op in kernel.operands:
        inner = f"{op.origin} = {callers[op.origin]}" if op.origin in callers else op.origin
        out[op.origin] = ref_name(op.param, inner) if op.param else (
            f"{op.origin} ({callers[op.origin]})" if op.origin in callers else op.origin)
    return out


def _short_source(source: str | None) -> str | None:
    """'/long/path/file.py:12' -> 'file.py:12' (the contract's form)."""
    return short_source(source)


def capture_json(inspections: tuple[KernelInspection, ...]) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "kernels": [kernel_json(i) for i in inspections]}
