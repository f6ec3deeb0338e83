"""The Memory view's GPU section: a Triton kernel's shared memory, registers, spills and blocks
per SM on a100 and h100; a Mosaic GPU kernel's shared memory buffers, barriers, register
estimate and blocks per SM on a100, h100 and b200.

Shared memory, registers and spills come from the real Triton compile (`lowering.lower(...,
compile=True)`: the triton wheel and its ptxas, no GPU needed; results are cached on disk), and
blocks per SM from the CUDA occupancy calculation (`pallaslab.analysis.occupancy_gpu.gpu_occupancy`)
with the `num_warps` the kernel is compiled with. A compile takes seconds, so the view asks for
this section only when told (`wb.memory(gpu=True)`). A Mosaic GPU kernel is not compiled on a
CPU host (see `lowering`), so its section is read off the capture
(`pallaslab.analysis.occupancy_gpu.mosaic_gpu_resources`) and always shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from pallaslab.analysis.occupancy_gpu import (
    SMEM_ALIGNMENT,
    MosaicGpuResources,
    gpu_occupancy,
    mosaic_gpu_resources,
)
from pallaslab.errors import MissingDependencyError
from pallaslab.model import Kernel
from pallaslab.views._html import num
from pallaslab.views.parts import Line, Part, Section, Table, Text

if TYPE_CHECKING:
    from pallaslab.lowering import KernelLowering

GPUS = ("a100", "h100")
MOSAIC_GPUS = ("a100", "h100", "b200")
TRITON_TITLE = "GPU: shared memory, registers, blocks per SM (Triton)"


class GpuMemory(TypedDict):
    gpu: str  # "a100"
    target: str  # "gpu-a100"
    error: str | None  # why there are no figures (the compile failed, ...)
    shared_bytes: int | None  # shared memory per block (Triton's metadata)
    registers: int | None  # per thread (ptxas -v)
    spills: int | None  # spill stores + loads, bytes (ptxas -v)
    num_warps: int
    blocks_per_sm: int | None
    limited_by: str | None  # "warps" | "registers" | "shared memory" | "blocks"
    warps_per_sm: int | None
    occupancy: float | None  # active warps / the SM's maximum


class SharedBufferEntry(TypedDict):
    origin: str
    label: str
    shape: list[int]
    dtype: str  # "float32" or "barrier"
    bytes: int


class GpuSection(TypedDict, total=False):
    gpus: list[GpuMemory]
    error: str | None  # why nothing was compiled (triton is not installed)
    title: str  # where the figures come from
    buffers: list[SharedBufferEntry]  # Mosaic GPU: the block's shared memory allocations
    note: str | None  # Mosaic GPU: how the registers were estimated


def gpu_section(kernel: Kernel, gpus: Sequence[str] = GPUS) -> GpuSection:
    """Compile `kernel` with Triton for each GPU and compute its blocks per SM."""
    from pallaslab import lowering
    from pallaslab.lowering.params import triton_launch

    num_warps = triton_launch(kernel)[0]  # what the compile used
    rows = []
    for gpu in gpus:
        target = f"gpu-{gpu}"
        try:
            kl = lowering.lower(kernel, target=target, compile=True)[0]
        except MissingDependencyError as err:
            return GpuSection(gpus=[], error=str(err))
        rows.append(_row(gpu, target, kl, num_warps))
    return GpuSection(gpus=rows, error=None, title=TRITON_TITLE)


def mosaic_gpu_section(kernel: Kernel, gpus: Sequence[str] = MOSAIC_GPUS, *,
                       compiled: bool = False) -> GpuSection:
    """A Mosaic GPU kernel's shared memory buffers and barriers, warps, registers and blocks
    per SM: from its capture (registers estimated), or with `compiled` from the real compile
    (XLA's CUDA plugin and ptxas; `make mosaic-gpu-compiler`) where it ran."""
    res = mosaic_gpu_resources(kernel)
    rows = [_mosaic_row(kernel, gpu, res, compiled) for gpu in gpus]
    buffers = [SharedBufferEntry(origin=b.origin, label=b.label, shape=list(b.shape),
                                 dtype=b.dtype, bytes=b.nbytes) for b in res.buffers]
    real = any(r["spills"] is not None for r in rows)
    note = ("shared memory, registers and spills: the real compile (XLA's CUDA plugin, "
            "ptxas)" if real else f"registers/thread: {res.register_basis}")
    if (padded := shared_padding(res)) is not None:
        note = f"{padded}; {note}"
    return GpuSection(gpus=rows, error=None, buffers=buffers, note=note, title=(
        "GPU: shared memory, barriers, blocks per SM (Mosaic GPU, "
        + ("compiled)" if real else "from the capture; registers estimated)")))


def shared_padding(res: MosaicGpuResources) -> str | None:
    """Why the block's shared memory exceeds its buffers' sum (None: it does not)."""
    listed = sum(b.nbytes for b in res.buffers)
    if res.shared_bytes == listed:
        return None
    return (f"shared memory per block {res.shared_bytes:,} B, not the buffers' {listed:,} B: "
            f"Mosaic GPU starts each array at a {SMEM_ALIGNMENT:,}-byte aligned offset and the "
            f"barriers after the last array, aligned too "
            f"({res.shared_bytes - listed:,} B of alignment padding)")


def _mosaic_row(kernel: Kernel, gpu: str, res: MosaicGpuResources,
                compiled: bool) -> GpuMemory:
    row = GpuMemory(gpu=gpu, target=f"gpu-{gpu}", error=None, shared_bytes=res.shared_bytes,
                    registers=res.registers, spills=None, num_warps=res.num_warps,
                    blocks_per_sm=None, limited_by=None, warps_per_sm=None, occupancy=None)
    occ = res.occupancy(gpu)
    if isinstance(occ, str):
        row["error"] = occ
        return row
    if compiled:
        from pallaslab import lowering

        try:
            kl = lowering.lower(kernel, target=f"gpu-{gpu}", compile=True)[0]
        except MissingDependencyError as err:
            kl = None
            row["error"] = str(err)
        if kl is not None and _problem(kl) is None:
            row["shared_bytes"], row["registers"] = kl.resources.smem_bytes or 0, \
                kl.resources.registers
            row["spills"] = kl.resources.spills
            occ = gpu_occupancy(row["shared_bytes"] or 0, row["registers"] or 0,
                                res.num_warps, gpu)
        elif kl is not None:
            row["error"] = _problem(kl)
            return row
    row["blocks_per_sm"], row["limited_by"] = occ.blocks_per_sm, occ.limited_by
    row["warps_per_sm"], row["occupancy"] = occ.warps_per_sm, occ.occupancy
    return row


def _row(gpu: str, target: str, kl: KernelLowering, num_warps: int) -> GpuMemory:
    res = kl.resources
    row = GpuMemory(gpu=gpu, target=target, error=_problem(kl), shared_bytes=res.smem_bytes,
                    registers=res.registers, spills=res.spills, num_warps=num_warps,
                    blocks_per_sm=None, limited_by=None, warps_per_sm=None, occupancy=None)
    if row["error"] is None and res.registers is not None:
        occ = gpu_occupancy(res.smem_bytes or 0, res.registers, num_warps, gpu)
        row["blocks_per_sm"], row["limited_by"] = occ.blocks_per_sm, occ.limited_by
        row["warps_per_sm"], row["occupancy"] = occ.warps_per_sm, occ.occupancy
    return row


def _problem(kl: KernelLowering) -> str | None:
    if kl.errors:
        return "; ".join(d.message for d in kl.errors)
    if not kl.compiled:  # a Mosaic GPU kernel: no compiler on this host
        return next((d.message for d in kl.diagnostics if d.code == "no-compiler"),
                    f"kernel {kl.name!r} was not compiled for {kl.backend}")
    if kl.resources.registers is None:
        return "ptxas reported no register count, so blocks per SM are unknown"
    return None


def gpu_tree(section: GpuSection) -> Section:
    """The GPU figures as parts: why there are none, Mosaic GPU's shared buffers, how the
    registers were estimated, and one row per GPU."""
    title = (section.get("title", TRITON_TITLE),)
    if section["error"]:
        return Section(title, (Line((Text(section["error"], "dim"),), css="pl-dim"),),
                       css="pl-mem-gpu")
    children: list[Part] = []
    if buffers := section.get("buffers"):
        children.append(Table(("shared memory", "shape", "dtype", "bytes"), tuple(
            (b["label"], str(tuple(b["shape"])), b["dtype"], num(b["bytes"])) for b in buffers),
            numeric=(3,)))
    if section.get("note"):
        children.append(Line((Text(section["note"] or "", "dim"),), css="pl-dim"))
    columns = ("GPU", "shared memory B", "registers/thread", "spills B", "num_warps",
               "blocks/SM", "limited by", "occupancy")
    rows = tuple((g["gpu"], num(g["shared_bytes"]), num(g["registers"]), num(g["spills"]),
                  str(g["num_warps"]), num(g["blocks_per_sm"]),
                  g["limited_by"] or ("see below" if g["error"] else "-"),
                  "-" if g["occupancy"] is None else f"{100 * g['occupancy']:.0f}%")
                 for g in section["gpus"])
    children.append(Table(columns, rows, numeric=(1, 2, 3, 4, 5, 7)))
    # why a GPU has no figures, under the table: a sentence too long for a cell
    children += [Line((f"{g['gpu']}: {g['error']}",)) for g in section["gpus"] if g["error"]]
    return Section(title, tuple(children), css="pl-mem-gpu")
