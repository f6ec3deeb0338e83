"""The Memory view's GPU section: a Triton kernel's shared memory, registers, spills and blocks
per SM on a100 and h100.

Shared memory, registers and spills come from the real Triton compile (`lowering.lower(...,
compile=True)`: the triton wheel and its ptxas, no GPU needed; results are cached on disk), and
blocks per SM from the CUDA occupancy calculation (`pallaslab.analysis.occupancy_gpu.gpu_occupancy`)
with the `num_warps` the kernel is compiled with. A compile takes seconds, so the view asks for
this section only when told (`wb.memory(gpu=True)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from pallaslab.analysis.occupancy_gpu import gpu_occupancy
from pallaslab.errors import MissingDependencyError
from pallaslab.model import Kernel
from pallaslab.views import _html
from pallaslab.views._html import esc

if TYPE_CHECKING:
    from lowering import KernelLowering

GPUS = ("a100", "h100")


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


class GpuSection(TypedDict):
    gpus: list[GpuMemory]
    error: str | None  # why nothing was compiled (triton is not installed)


def gpu_section(kernel: Kernel, gpus: Sequence[str] = GPUS) -> GpuSection:
    """Compile `kernel` with Triton for each GPU and compute its blocks per SM."""
    import lowering
    from lowering.params import triton_launch

    num_warps = triton_launch(kernel)[0]  # what the compile used
    rows = []
    for gpu in gpus:
        target = f"gpu-{gpu}"
        try:
            kl = lowering.lower(kernel, target=target, compile=True)[0]
        except MissingDependencyError as err:
            return GpuSection(gpus=[], error=str(err))
        rows.append(_row(gpu, target, kl, num_warps))
    return GpuSection(gpus=rows, error=None)


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


def _bytes(n: int | None) -> str:
    return "-" if n is None else f"{n:,} B"


def gpu_text(section: GpuSection) -> list[str]:
    lines = ["  GPU, from the Triton compile:"]
    if section["error"]:
        return [*lines, f"    {section['error']}"]
    for g in section["gpus"]:
        if g["error"]:
            lines.append(f"    {g['gpu']}: {g['error']}")
            continue
        lines.append(
            f"    {g['gpu']}: shared memory {_bytes(g['shared_bytes'])}, {g['registers']} "
            f"registers/thread, {_bytes(g['spills'])} spilled, {g['num_warps']} warps -> "
            f"{g['blocks_per_sm']} blocks/SM (limited by {g['limited_by']}; "
            f"{g['warps_per_sm']} warps/SM, {100 * (g['occupancy'] or 0):.0f}% occupancy)")
    return lines


def gpu_html(section: GpuSection) -> str:
    title = '<h4 class="pl-title">GPU: shared memory, registers, blocks per SM (Triton)</h4>'
    if section["error"]:
        return f'<div class="pl-mem-gpu">{title}<p class="pl-dim">{esc(section["error"])}</p></div>'
    headers = ["GPU", "shared memory B", "registers/thread", "spills B", "num_warps",
               "blocks/SM", "limited by", "occupancy"]
    rows = [[g["gpu"], _html.num(g["shared_bytes"]), _html.num(g["registers"]),
             _html.num(g["spills"]), g["num_warps"], _html.num(g["blocks_per_sm"]),
             g["limited_by"] or g["error"] or "-",
             "-" if g["occupancy"] is None else f"{100 * g['occupancy']:.0f}%"]
            for g in section["gpus"]]
    table = _html.table(headers, rows, numeric=(1, 2, 3, 4, 5, 7))
    return f'<div class="pl-mem-gpu">{title}{table}</div>'
