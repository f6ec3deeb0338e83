"""VMEM / SMEM occupancy of a TPU kernel, per chip, checked against the real compiler.

What Mosaic allocates in scoped VMEM for a `pallas_call`:
- every windowed operand (a BlockSpec in VMEM): `buffer_count` buffers (default 2, double
  buffering; `pipeline_mode=pl.Buffered(n)` sets n) of one block. A grid of a single step is
  not pipelined: one buffer per operand.
- every VMEM scratch buffer once;
- each buffer padded to the layout Mosaic's infer-memref-layout pass gives it: the minor
  dimension to 128 lanes, the second-minor to the chip's tile rows for the dtype (8 for 32-
  and 16-bit types before TPU7x, 32 for 8-bit) when they divide it, else to a power of two of
  at most 8 rows; a rank-1 buffer to a multiple of 128 x packing elements.
- an operand whose index map is constant (the same block every step), or any operand of a
  single-step grid, gets one buffer: there is nothing to prefetch.
- what the body allocates: `run_scoped` buffers once each, sequential regions sharing memory
  (the need is the most any one of them needs, not their sum); each nested `emit_pipeline`
  `buffer_count` (default 2) buffers per operand it copies, whatever its grid (none when it
  is given its buffers, `allocations=`: they are `run_scoped` buffers already counted).
SMEM holds scalar-prefetch operands, SMEM blocks and SMEM scratch; semaphores are counted
(nested pipelines: one DMA semaphore per buffer).

The total is judged against the kernel's `vmem_limit_bytes` or the chip's default scoped
limit (measured with libtpu, see `chips.py`); libtpu caps a limit above the chip's VMEM at it.
tests/analysis/test_vmem_fidelity.py compares these estimates with the smallest
`vmem_limit_bytes` the real compiler accepts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from pallaslab.analysis.body_values import large_values, largest_product, storage_dtype
from pallaslab.analysis.chips import DEFAULT_CHIPS, Chip
from pallaslab.analysis.chips import chip as get_chip
from pallaslab.model import Kernel, Operand, _jax

Space = Literal["vmem", "smem", "semaphore", "hbm"]
_SMEM_WORD = 4
_SEMAPHORE_SPACES = ("semaphore", "semaphore_mem", "dma_semaphore", "sem")


@dataclasses.dataclass(frozen=True)
class OperandOccupancy:
    """One operand's share of on-chip memory."""

    origin: str
    role: str  # "input", "output", "scratch"
    space: Space  # where its buffers live ("hbm": nothing on chip)
    dtype: str
    shape: tuple[int, ...]  # one buffer as the kernel sees it (squeezed dims dropped)
    padded_shape: tuple[int, ...]  # the buffer after Mosaic's tiling
    buffers: int  # pipeline slots (1 for scratch and single-step grids)
    buffer_bytes: int  # one padded buffer
    bytes: int  # what it takes of scoped VMEM: buffers x buffer_bytes (0 when not `scoped`)
    # False for pipelined blocks narrower than 128 lanes: libtpu keeps them out of the scoped
    # VMEM allocation (measured on v5e and v6e: a (2048, 8) f32 block pipelined in or out
    # needs 0 KiB of vmem_limit_bytes, a (2048, 128) one 2 x 1 MiB).
    scoped: bool = True

    @property
    def unpadded_bytes(self) -> int:
        return self.buffers * math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def padding_bytes(self) -> int:
        if self.space == "semaphore" or not self.scoped:
            return 0
        return self.bytes - self.unpadded_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin, "role": self.role, "space": self.space, "dtype": self.dtype,
            "shape": list(self.shape), "padded_shape": list(self.padded_shape),
            "buffers": self.buffers, "buffer_bytes": self.buffer_bytes, "bytes": self.bytes,
            "scoped": self.scoped,
        }


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """On-chip memory of one kernel on one TPU chip."""

    kernel: str
    chip: str  # "v5e"
    operands: tuple[OperandOccupancy, ...]
    bytes: int  # scoped VMEM the kernel needs
    limit: int  # the scoped-VMEM limit it is compiled with
    limit_source: str  # "vmem_limit_bytes" or "chip default"
    vmem_capacity: int
    smem_bytes: int
    smem_capacity: int
    semaphores: int
    # In-kernel values of at least SPILL_RISK_BYTES (largest first): the compiler may keep
    # them in scoped VMEM on top of `bytes` (not counted; see `spill_note`).
    large_values: tuple[tuple[tuple[int, ...], str, int], ...] = ()
    vmem_usable: int | None = None  # the VMEM the compiler lets buffers use (None: capacity)
    # The largest matrix product the body computes (shape, dtype, bytes), if one reaches
    # SPILL_RISK_BYTES: the MXU's result lands in scoped VMEM whole, beside the buffers.
    product: tuple[tuple[int, ...], str, int] | None = None
    # Of the operands' bytes, what sequential `run_scoped` regions share (not in `bytes`).
    scoped_shared: int = 0

    @property
    def product_bytes(self) -> int:
        return self.product[2] if self.product is not None else 0

    @property
    def need_bytes(self) -> int:
        """Scoped VMEM the kernel needs: its buffers plus the matrix product its body
        materialises (the rule of `vmem-spill-risk` and the what-if table; libtpu refuses a
        bf16 matmul with 1024 blocks on v5e, 16 MiB of buffers, needing 18.36 MiB)."""
        return self.bytes + self.product_bytes

    @property
    def need_fits(self) -> bool:
        """The buffers and the body's matrix product fit the limit (see `need_bytes`)."""
        return self.fits and self.need_bytes <= self.effective_limit

    @property
    def spill_note(self) -> str | None:
        if not self.large_values:
            return None
        shape, dtype, size = self.large_values[0]
        return (f"the kernel body computes a {dtype}{list(shape)} value ({kib(size)}); the "
                "compiler may spill values this large to scoped VMEM beyond the buffers counted "
                "here (measured with libtpu: up to about twice the largest such value)")

    @property
    def shown_spill_note(self) -> str | None:
        """The spill note where its value is not the matrix product already counted beside
        the buffers (a plain matmul's dot result: the `body` row judges it), as the Memory
        view, its text and `pallaslab inspect` show it."""
        return None if self.large_values[:1] == (self.product,) else self.spill_note

    @property
    def effective_limit(self) -> int:
        """The limit the compiler applies: libtpu 0.0.52 caps a `vmem_limit_bytes` above the
        chip's VMEM at the VMEM it lets kernels use (`Chip.vmem_usable`: v5e 128 MiB, v6e
        128 MiB - 64 KiB, 7x 64 MiB - 64 KiB; re-checked by
        tests/analysis/test_findings_vs_compiler.py)."""
        usable = self.vmem_capacity if self.vmem_usable is None else self.vmem_usable
        return min(self.limit, usable)

    @property
    def fits(self) -> bool:
        return self.bytes <= self.effective_limit and self.smem_bytes <= self.smem_capacity

    @property
    def fraction(self) -> float:
        return self.bytes / self.effective_limit if self.effective_limit else math.inf

    def operand(self, origin: str) -> OperandOccupancy:
        for op in self.operands:
            if op.origin == origin:
                return op
        raise KeyError(f"{self.kernel}: no operand {origin!r} "
                       f"(have {', '.join(o.origin for o in self.operands)})")

    def summary(self) -> dict[str, Any]:
        """The `vmem` entry of `inspect --json`."""
        return {"bytes": self.bytes, "limit": self.limit, "fits": self.fits}

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary(), "kernel": self.kernel, "chip": self.chip,
            "limit_source": self.limit_source, "vmem_capacity": self.vmem_capacity,
            "smem_bytes": self.smem_bytes, "smem_capacity": self.smem_capacity,
            "semaphores": self.semaphores, "operands": [op.to_json() for op in self.operands],
            "spill_note": self.spill_note, "product_bytes": self.product_bytes,
            "need_bytes": self.need_bytes, "need_fits": self.need_fits,
            "scoped_shared": self.scoped_shared,
        }

    def __str__(self) -> str:
        verdict = "fits" if self.fits else "DOES NOT FIT"
        if self.limit_source == "SparseCore subcore VMEM" and not self.limit:
            verdict = "DOES NOT RUN: the chip has no SparseCore"
        lines = [f"{self.kernel} on {self.chip}: {kib(self.bytes)} of {kib(self.limit)} "
                 f"scoped VMEM ({self.limit_source}) -- {verdict}"]
        for op in self.operands:
            if op.space == "hbm":
                continue
            lines.append(f"  {op.origin:<12} {op.space:<9} {op.buffers} x "
                         f"{'x'.join(map(str, op.padded_shape)) or '()'} {op.dtype:<9} "
                         f"{kib(op.bytes):>12}")
        if self.scoped_shared:
            lines.append(f"  {'shared':<12} {'vmem':<9} sequential run_scoped regions reuse "
                         f"{kib(self.scoped_shared)} (not counted twice)")
        if self.product is not None:
            shape, dtype, size = self.product
            lines.append(f"  {'body':<12} {'vmem':<9} {dtype}{list(shape)} matrix product "
                         f"{kib(size):>12}: {kib(self.need_bytes)} with the buffers -- "
                         f"{'fits' if self.need_fits else 'DOES NOT FIT'}")
        if self.shown_spill_note:
            lines.append(f"  note: {self.shown_spill_note}")
        return "\n".join(lines)


def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):,.2f} MiB"


# --- Mosaic's VMEM layout ---------------------------------------------------------------------


def tiling_factor(rows: int, bits: int, chip: Chip) -> int:
    """Rows of the tile Mosaic's infer-memref-layout picks for a second-minor extent `rows`.

    The chip's large tile (32 rows for 8-bit types) when it divides `rows`; otherwise the
    smallest power of two >= `rows`, at least the dtype's packing and at most 8. Checked
    against libtpu's layouts (`--xla_mosaic_dump_to`): int8 rows 64 -> (32,128), 48 -> (8,128),
    3 -> (4,128); f32 1 -> (1,128); bf16 12 -> (8,128)(2,1).
    """
    large = chip.tile_rows_for_bits(bits)
    if rows > 0 and rows % large == 0:
        return large
    packing = max(1, 32 // bits)
    tile = (1 + (chip.generation < 4)) * packing
    while tile < min(rows, chip.sublanes):
        tile *= 2
    return tile


def padded_shape(shape: Sequence[int], dtype: Any, chip: Chip) -> tuple[int, ...]:
    """A VMEM buffer's shape after Mosaic pads it to its native tiling on `chip`.

    Rank >= 2: the minor dimension to 128 lanes, the second-minor to `tiling_factor` rows.
    Rank 1: to a multiple of 128 x packing elements (f32 128, bf16 256, int8 512).
    """
    dt = storage_dtype(dtype)
    bits = dt.itemsize * 8
    lanes = chip.lanes
    if len(shape) <= 1:
        n = shape[0] if shape else 1
        return (round_up(n, lanes * max(1, 32 // bits)),)
    rows = tiling_factor(shape[-2], bits, chip)
    return (*shape[:-2], round_up(shape[-2], rows), round_up(shape[-1], lanes))


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


# --- per operand ------------------------------------------------------------------------------


def operand_occupancy(
    op: Operand, kernel: Kernel, chip: Chip, constant_index: bool = False
) -> OperandOccupancy:
    space = _space(op)
    if space == "vmem" and op.memory_space == "default" and op.role != "scratch" \
            and kernel is not None and kernel.kind == "mesh":
        space = "hbm"  # a mesh kernel's (pl.kernel, pl.core_map) operands stay in HBM
    shape = _buffer_shape(op)
    dtype = storage_dtype(op.dtype)
    if space == "hbm":
        return OperandOccupancy(op.origin, op.role, space, dtype.name, shape, shape, 0, 0, 0)
    if space == "semaphore":
        count = math.prod(shape) if shape else 1
        return OperandOccupancy(op.origin, op.role, space, "semaphore", shape, shape, 1, 0, 0) \
            if count == 0 else OperandOccupancy(op.origin, op.role, space, "semaphore", shape,
                                                shape, 1, count, count)
    if space == "smem":
        padded = shape
        size = round_up(math.prod(shape) * dtype.itemsize, _SMEM_WORD) if shape else _SMEM_WORD
    else:
        padded = padded_shape(shape, dtype, chip)
        size = math.prod(padded) * dtype.itemsize
    buffers = _buffers(op, kernel, constant_index)
    scoped = not (space == "vmem" and _narrow_pipelined_block(op, shape, chip))
    return OperandOccupancy(op.origin, op.role, space, dtype.name, shape, padded, buffers,
                            size, buffers * size if scoped else 0, scoped)


def _narrow_pipelined_block(op: Operand, shape: tuple[int, ...], chip: Chip) -> bool:
    """A BlockSpec block of rank >= 2 narrower than the lanes (so it spans the array's whole
    minor dimension): libtpu keeps its buffers out of scoped VMEM."""
    return (op.block_dims is not None and op.role in ("input", "output") and op.windowed
            and len(shape) >= 2 and shape[-1] < chip.lanes)


def _space(op: Operand) -> Space:
    ms = op.memory_space
    if op.scalar_prefetch or ms == "smem":
        return "smem"
    if ms in _SEMAPHORE_SPACES or "semaphore" in ms:
        return "semaphore"
    if ms in ("any", "hbm", "host"):
        return "hbm"
    if op.role != "scratch" and op.block_dims is None and ms == "default":
        # No BlockSpec on a pallas_call operand: Pallas maps the whole array into VMEM.
        return "vmem"
    return "vmem"


def _buffer_shape(op: Operand) -> tuple[int, ...]:
    if op.block_dims is not None:
        return tuple(d.size for d in op.block_dims if not d.squeezed)
    return tuple(op.shape)


def allocated_buffers(kernel: Kernel) -> dict[str, int]:
    """Operand origin -> the pipeline slots it gets on chip (the Memory view's figure)."""
    constant = _jax.constant_index_maps(kernel)
    return {op.origin: _buffers(op, kernel, constant.get(op.origin, False))
            for op in kernel.operands if op.block_dims is not None}


def _buffers(op: Operand, kernel: Kernel, constant_index: bool) -> int:
    if op.role == "scratch" or op.scalar_prefetch or not op.windowed:
        return 1
    programs = kernel.programs
    if programs is not None and programs <= 1:
        return 1  # nothing to overlap: Mosaic does not multi-buffer a single-step grid
    if constant_index:
        return 1  # the same block every step: fetched once, Mosaic gives it one buffer
    return op.buffer_count if op.buffer_count is not None else 2


# --- buffers the kernel body allocates: run_scoped, nested emit_pipelines --------------------


def body_occupancy(kernel: Kernel, chip: Chip, prefix: str = "") -> tuple[OperandOccupancy, ...]:
    """`run_scoped` buffers (once each) and every nested `emit_pipeline`'s buffers, recursively
    (none for a pipeline given its buffers: the `run_scoped` that made them holds them).

    Each buffer's own bytes; `scoped_sharing` says how much of their sum sequential
    `run_scoped` regions share.
    """
    out = [dataclasses.replace(operand_occupancy(op, kernel, chip), origin=prefix + op.origin)
           for op in kernel.scoped]
    for i, pipeline in enumerate(kernel.pipelines):
        label = f"{prefix}pipelines[{i}]."
        out += [pipeline_operand_occupancy(op, chip, label, pipeline.preallocated)
                for op in pipeline.operands]
        out += body_occupancy(pipeline, chip, label)
    return tuple(out)


def scoped_sharing(kernel: Kernel, chip: Chip) -> int:
    """Bytes of scoped VMEM that the body's `run_scoped` buffers counted one by one overstate:
    Mosaic frees a region's buffers when it ends, so regions neither of which encloses the
    other (one after the other, or the branches of a `cond`) are alive one at a time. A
    region needs its own buffers plus the most any one of the regions directly inside it
    needs; the body, the most of its outermost regions. Buffers with no region (`scope`
    empty) stay counted whole."""
    own: dict[tuple[int, ...], int] = {}
    total = 0
    for op in kernel.scoped:
        if not op.scope or _space(op) != "vmem":
            continue
        size = operand_occupancy(op, kernel, chip).bytes
        total += size
        for depth in range(1, len(op.scope) + 1):
            own.setdefault(op.scope[:depth], 0)
        own[op.scope] += size

    def need(region: tuple[int, ...]) -> int:
        inner = [need(r) for r in own if len(r) == len(region) + 1 and r[:-1] == region]
        return (own[region] if region else 0) + max(inner, default=0)

    return total - need(())


def pipeline_operand_occupancy(op: Operand, chip: Chip, label: str,
                               preallocated: bool = False) -> OperandOccupancy:
    """One operand of an `emit_pipeline`, as jax/_src/pallas/mosaic/pipeline.py allocates it:
    `buffer_count` (default 2) buffers of one block, even for a single step or a constant
    index map (and as many DMA semaphores, see `pipeline_semaphores`) -- unless the outer ref
    already lives in the block's memory space (`Operand.in_place`): the pipeline then
    windows it in place; or the pipeline was given its buffers (`preallocated`)."""
    one = operand_occupancy(dataclasses.replace(op, role="scratch"), _NO_KERNEL, chip)
    count = 0 if op.in_place or preallocated else (op.buffer_count or 2)
    return dataclasses.replace(one, origin=label + op.origin, role=op.role, buffers=count,
                               bytes=count * one.buffer_bytes)


def pipeline_semaphores(kernel: Kernel) -> int:
    """DMA semaphores of the nested pipelines: one per buffer of each copied operand (none
    for a pipeline given its buffers: their semaphores are `run_scoped` ones)."""
    total = 0
    for pipeline in kernel.pipelines:
        if not pipeline.preallocated:
            total += sum(op.buffer_count or 2 for op in pipeline.operands if not op.in_place)
        total += pipeline_semaphores(pipeline)
    return total


# `operand_occupancy` reads the enclosing kernel only for pipelined (non-scratch) operands.
_NO_KERNEL: Kernel = None  # type: ignore[assignment]


# --- per kernel -------------------------------------------------------------------------------


LimitSource = Literal["vmem_limit_bytes", "chip default", "SparseCore subcore VMEM"]
# Meshes of SparseCore subcores: their buffers live in each vector subcore's own VMEM.
SPARSE_CORE_MESHES = frozenset({"VectorSubcoreMesh", "ScalarSubcoreMesh"})


def on_sparse_core(kernel: Kernel) -> bool:
    return kernel.mesh is not None and kernel.mesh.kind in SPARSE_CORE_MESHES


def vmem_limit(kernel: Kernel, chip: Chip) -> tuple[int, LimitSource]:
    """The scoped-VMEM limit the kernel compiles with: its own `vmem_limit_bytes` or the chip's
    (a SparseCore kernel: one vector subcore's VMEM; 0 on a chip with no SparseCore)."""
    if on_sparse_core(kernel):
        return chip.sparse_core_vmem or 0, "SparseCore subcore VMEM"
    for params in kernel.compiler_params.values():
        limit = params.get("vmem_limit_bytes") if hasattr(params, "get") else None
        if limit is not None:
            return int(limit), "vmem_limit_bytes"
    return chip.default_scoped_vmem, "chip default"


def occupancy(kernel: Kernel, chip: str | Chip = "v5e") -> Occupancy:
    """VMEM/SMEM use of `kernel` on a TPU chip, per operand, against its scoped-VMEM limit."""
    c = chip if isinstance(chip, Chip) else get_chip(chip)
    constant = _jax.constant_index_maps(kernel)
    ops = tuple(operand_occupancy(op, kernel, c, constant.get(op.origin, False))
                for op in kernel.operands) + body_occupancy(kernel, c)
    limit, source = vmem_limit(kernel, c)
    values = _jax.kernel_body_values(kernel)
    shared = scoped_sharing(kernel, c)
    return Occupancy(
        kernel=kernel.name,
        chip=c.name,
        operands=ops,
        bytes=sum(o.bytes for o in ops if o.space == "vmem") - shared,
        scoped_shared=shared,
        limit=limit,
        limit_source=source,
        vmem_capacity=limit if on_sparse_core(kernel) else c.vmem_capacity,
        smem_bytes=sum(o.bytes for o in ops if o.space == "smem"),
        smem_capacity=c.smem_capacity,
        semaphores=sum(o.bytes for o in ops if o.space == "semaphore")
        + pipeline_semaphores(kernel),
        large_values=large_values(values),
        vmem_usable=limit if on_sparse_core(kernel) else c.vmem_usable,
        product=largest_product(values),
    )


def applies(kernel: Kernel) -> bool:
    """TPU occupancy means something for TPU kernels and kernels that name no backend."""
    return kernel.backend in (None, "tpu")


def vmem_section(kernel: Kernel, chips: Iterable[str] = DEFAULT_CHIPS) -> dict[str, Any]:
    """The `vmem` section of `inspect --json`: {"tpu-v5e": {"bytes", "limit", "fits"}, ...}."""
    if not applies(kernel):
        return {}
    out: dict[str, Any] = {}
    for name in chips:
        occ = occupancy(kernel, name)
        out[get_chip(name).target] = occ.summary()
    return out


def spill_note(kernel: Kernel) -> str | None:
    """What the kernel body computes that the compiler may spill (None: nothing that large,
    or only the matrix product the `body` row judges);
    the same on every chip (a value's size is the chip's layout-independent one)."""
    return occupancy(kernel, DEFAULT_CHIPS[0]).shown_spill_note if applies(kernel) else None
