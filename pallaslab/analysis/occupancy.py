"""VMEM / SMEM occupancy of a TPU kernel, per chip, checked against the real compiler.

What Mosaic allocates in scoped VMEM for a `pallas_call`:
- every windowed operand (a BlockSpec in VMEM): `buffer_count` buffers (default 2, double
  buffering; `pipeline_mode=pl.Buffered(n)` sets n) of one block. A grid of a single step is
  not pipelined: one buffer per operand.
- every VMEM scratch buffer once;
- each buffer padded to the layout Mosaic's infer-memref-layout pass gives it: the minor
  dimension to 128 lanes, the second-minor to the chip's tile rows for the dtype (8 for 32-
  and 16-bit types before TPU7x, 32 for 8-bit; a short second-minor dimension gets a smaller
  power-of-two tile), a rank-1 buffer to a multiple of (tile x 128) elements.
SMEM holds scalar-prefetch operands, SMEM blocks and SMEM scratch; semaphores are counted.

The total is judged against the kernel's `vmem_limit_bytes` or the chip's default scoped
limit (measured with libtpu, see `chips.py`). tests/test_vmem_fidelity.py compares these
estimates with the smallest `vmem_limit_bytes` the real compiler accepts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from pallaslab.analysis.chips import DEFAULT_CHIPS, Chip, chip as get_chip
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
    bytes: int  # buffers x buffer_bytes

    @property
    def unpadded_bytes(self) -> int:
        return self.buffers * math.prod(self.shape) * np.dtype(self.dtype).itemsize

    @property
    def padding_bytes(self) -> int:
        return self.bytes - self.unpadded_bytes if self.space != "semaphore" else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin, "role": self.role, "space": self.space, "dtype": self.dtype,
            "shape": list(self.shape), "padded_shape": list(self.padded_shape),
            "buffers": self.buffers, "buffer_bytes": self.buffer_bytes, "bytes": self.bytes,
        }


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """On-chip memory of one kernel on one TPU chip."""

    kernel: str
    chip: str  # "v5e"
    operands: tuple[OperandOccupancy, ...]
    bytes: int  # scoped VMEM the kernel needs
    limit: int  # the scoped-VMEM limit it is compiled with
    limit_source: Literal["vmem_limit_bytes", "chip default"]
    vmem_capacity: int
    smem_bytes: int
    smem_capacity: int
    semaphores: int

    @property
    def fits(self) -> bool:
        return (self.bytes <= self.limit and self.limit <= self.vmem_capacity
                and self.smem_bytes <= self.smem_capacity)

    @property
    def fraction(self) -> float:
        return self.bytes / self.limit if self.limit else math.inf

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
        }

    def __str__(self) -> str:
        verdict = "fits" if self.fits else "DOES NOT FIT"
        lines = [f"{self.kernel} on {self.chip}: {_kib(self.bytes)} of {_kib(self.limit)} "
                 f"scoped VMEM ({self.limit_source}) -- {verdict}"]
        for op in self.operands:
            if op.space == "hbm":
                continue
            lines.append(f"  {op.origin:<12} {op.space:<9} {op.buffers} x "
                         f"{'x'.join(map(str, op.padded_shape)) or '()'} {op.dtype:<9} "
                         f"{_kib(op.bytes):>12}")
        return "\n".join(lines)


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


# --- Mosaic's VMEM layout ------------------------------------------------------------------------


def tiling_factor(rows: int, bits: int, chip: Chip, large: int) -> int:
    """Rows of the tile Mosaic's infer-memref-layout picks for a second-minor extent `rows`.

    A buffer at least one large tile tall gets the large tile; a shorter one the smallest
    power of two >= its height, between the dtype's packing and 8 rows.
    """
    if large <= rows:
        return large
    packing = max(1, 32 // bits)
    tile = (1 + (chip.generation < 4)) * packing
    while tile < min(rows, 8):
        tile *= 2
    return tile


def padded_shape(shape: Sequence[int], dtype: Any, chip: Chip) -> tuple[int, ...]:
    """A VMEM buffer's shape after Mosaic pads it to its native tiling on `chip`."""
    dt = _storage_dtype(dtype)
    bits = dt.itemsize * 8
    large = chip.tile_rows(dt)
    lanes = chip.lanes
    if len(shape) == 0:
        return (tiling_factor(1, bits, chip, large) * lanes,)
    if len(shape) == 1:
        tile = tiling_factor(-(-shape[0] // lanes), bits, chip, large) * lanes
        return (_round_up(shape[0], tile),)
    rows = tiling_factor(shape[-2], bits, chip, large)
    return (*shape[:-2], _round_up(shape[-2], rows), _round_up(shape[-1], lanes))


def _storage_dtype(dtype: Any) -> np.dtype:
    dt = np.dtype(dtype)
    # Booleans live as 32-bit words in VMEM (Mosaic has no i1 memrefs).
    return np.dtype(np.int32) if dt == np.bool_ else dt


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


# --- per operand ---------------------------------------------------------------------------------


def operand_occupancy(
    op: Operand, kernel: Kernel, chip: Chip, constant_index: bool = False
) -> OperandOccupancy:
    space = _space(op)
    shape = _buffer_shape(op)
    dtype = _storage_dtype(op.dtype)
    if space == "hbm":
        return OperandOccupancy(op.origin, op.role, space, dtype.name, shape, shape, 0, 0, 0)
    if space == "semaphore":
        count = math.prod(shape) if shape else 1
        return OperandOccupancy(op.origin, op.role, space, "semaphore", shape, shape, 1, 0, 0) \
            if count == 0 else OperandOccupancy(op.origin, op.role, space, "semaphore", shape,
                                                shape, 1, count, count)
    if space == "smem":
        padded = shape
        size = _round_up(math.prod(shape) * dtype.itemsize, _SMEM_WORD) if shape else _SMEM_WORD
    else:
        padded = padded_shape(shape, dtype, chip)
        size = math.prod(padded) * dtype.itemsize
    buffers = _buffers(op, kernel, constant_index)
    return OperandOccupancy(op.origin, op.role, space, dtype.name, shape, padded, buffers,
                            size, buffers * size)


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


def _buffers(op: Operand, kernel: Kernel, constant_index: bool) -> int:
    if op.role == "scratch" or op.scalar_prefetch or not op.windowed:
        return 1
    programs = kernel.programs
    if programs is not None and programs <= 1:
        return 1  # nothing to overlap: Mosaic does not multi-buffer a single-step grid
    if constant_index:
        return 1  # the same block every step: fetched once, Mosaic gives it one buffer
    return op.buffer_count if op.buffer_count is not None else 2


# --- per kernel ------------------------------------------------------------------------------------


def vmem_limit(kernel: Kernel, chip: Chip) -> tuple[int, Literal["vmem_limit_bytes", "chip default"]]:
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
                for op in kernel.operands)
    limit, source = vmem_limit(kernel, c)
    return Occupancy(
        kernel=kernel.name,
        chip=c.name,
        operands=ops,
        bytes=sum(o.bytes for o in ops if o.space == "vmem"),
        limit=limit,
        limit_source=source,
        vmem_capacity=c.vmem_capacity,
        smem_bytes=sum(o.bytes for o in ops if o.space == "smem"),
        smem_capacity=c.smem_capacity,
        semaphores=sum(o.bytes for o in ops if o.space == "semaphore"),
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
