"""Frozen descriptions of captured Pallas kernels.

These dataclasses are plain data: shapes, dtypes, block shapes, index-map jaxprs as text.
What must stay live (the JAX equation, the vectorized index-map evaluator) hangs off
`Kernel.handle`, an opaque object only `pallaslab.model._jax` knows how to use.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

Role = Literal["input", "output", "scratch"]
BlockKind = Literal["blocked", "squeezed", "element", "bounded", "indirect"]
KernelKind = Literal["pallas_call", "mesh", "pipeline"]  # "pipeline": a nested emit_pipeline
DmaKind = Literal["async", "sync", "remote", "tma"]  # tma: a Mosaic GPU GMEM<->SMEM copy
# barrier_*: Mosaic GPU mbarriers (a TMA copy arrives on its barrier when it lands)
SemaphoreOpKind = Literal["signal", "wait", "read", "dma_wait", "barrier_wait", "barrier_arrive"]
Backend = Literal["tpu", "triton", "mosaic_gpu"]


@dataclasses.dataclass(frozen=True)
class BlockDim:
    """One dimension of a BlockSpec's block shape, as Pallas canonicalised it."""

    kind: BlockKind
    size: int  # elements in the block along this dimension (1 when squeezed)
    padding: tuple[int, int] = (0, 0)  # only for `pl.Element`

    @property
    def squeezed(self) -> bool:
        return self.kind == "squeezed"


@dataclasses.dataclass(frozen=True)
class Operand:
    """An operand of a kernel: an input, an output, a scratch buffer or a scalar-prefetch array."""

    origin: str  # Pallas's own label: "args[0]", "outputs[1]", "scratch[0]"
    role: Role
    shape: tuple[int, ...]
    dtype: np.dtype
    memory_space: str  # "default", "any", "vmem", "smem", "hbm", "semaphore", ...
    block_dims: tuple[BlockDim, ...] | None = None  # None: no BlockSpec window
    index_map_jaxpr: str | None = None
    index_map_source: str | None = None  # "file.py:LINE" of the index-map function
    buffer_count: int | None = None  # pipeline buffers (`pl.Buffered(n)`); 2 when unspecified
    scalar_prefetch: bool = False
    aliased_with: str | None = None  # origin of the input/output sharing its buffer
    # Outputs: "file.py:LINE" of a select (`jnp.where`) that every use of the output goes
    # through after the kernel, so elements the kernel leaves may be selected away
    selected_after: str | None = None
    param: str | None = None  # the kernel function's own parameter name: "x_ref", "acc_ref"
    outer: str | None = None  # nested pipelines: the enclosing kernel's ref this one windows
    # ... in place: the outer ref already lives in the block's memory space, so the pipeline
    # slices it where it is (no buffers, no copies; a BoundedSlice window spans its bound)
    in_place: bool = False
    # A buffer of non-array elements (Mosaic GPU "barrier", TPU semaphores): `dtype` is a
    # stand-in int32.
    value_type: str | None = None
    # `run_scoped` buffers: the regions enclosing it, outermost first, its own last (ids in
    # the order the body opens them); regions neither of which encloses the other are alive
    # one after the other (see analysis/occupancy.py).
    scope: tuple[int, ...] = ()

    @property
    def is_semaphore(self) -> bool:
        """A buffer of TPU semaphores (scratch, or passed between kernels): it has no dtype
        and no bytes of data."""
        return self.value_type is not None and self.value_type != "barrier"

    @property
    def element(self) -> str:
        """What one element is, as tables say it: the dtype ("float32"), or the value type of
        semaphores and barriers ("dma_sem", "barrier") -- never their int32 stand-in."""
        return self.value_type or str(self.dtype)

    @property
    def block_shape(self) -> tuple[int | None, ...] | None:
        """Block shape as users write it: `None` for squeezed dimensions."""
        if self.block_dims is None:
            return None
        return tuple(None if d.squeezed else d.size for d in self.block_dims)

    @property
    def block_extent(self) -> tuple[int, ...] | None:
        """Elements the block spans per array dimension (1 for squeezed)."""
        if self.block_dims is None:
            return None
        return tuple(d.size for d in self.block_dims)

    @property
    def itemsize(self) -> int:
        return int(np.dtype(self.dtype).itemsize)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def block_nbytes(self) -> int | None:
        extent = self.block_extent
        return None if extent is None else math.prod(extent) * self.itemsize

    @property
    def windowed(self) -> bool:
        """True when Pallas pipelines this operand block by block (it has a BlockSpec window)."""
        return self.block_dims is not None and self.memory_space not in ("any", "hbm") \
            and not self.in_place


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    flops: int
    transcendentals: int
    bytes_accessed: int


@dataclasses.dataclass(frozen=True)
class MeshInfo:
    """The mesh of a `pl.kernel` / `plgpu.kernel` launch."""

    kind: str  # the mesh class name, e.g. "TensorCoreMesh", "Mesh" (Mosaic GPU)
    axes: tuple[tuple[str, int], ...]
    # Mosaic GPU: the warpgroup axis (`thread_name`, `num_threads`) among `axes`, if any.
    warpgroups: tuple[str, int] | None = None


@dataclasses.dataclass(frozen=True)
class DmaCopy:
    """A DMA the kernel body starts by hand (`make_async_copy`/`async_copy`, `sync_copy`,
    `make_async_remote_copy`). Refs are named by origin in the enclosing kernel ("args[0]",
    "scratch[1]", "scoped[0]"); `shape` is the copied window, not the whole ref, None for a
    dimension known only while the kernel runs (`x.at[pl.ds(start, n)]` with `n` a value)."""

    kind: DmaKind
    src: str
    dst: str
    src_memory_space: str
    dst_memory_space: str
    shape: tuple[int | None, ...]
    dtype: np.dtype
    semaphore: str | None  # origin of the DMA semaphore it signals (None for sync_copy)
    source: str | None  # "file.py:LINE" of the user's call
    repeated: bool = False  # inside a loop of the body: runs once per iteration
    # Remote copies: the destination device, as the jaxpr computes it ("rem(axis_index(x) + 1,
    # 4)"), and how it is numbered ("mesh": mesh coordinates, "logical": a flat device id).
    device_id: str | None = None
    device_id_type: str | None = None

    @property
    def nbytes(self) -> int | None:
        """Bytes copied; None when a dimension is dynamic."""
        if any(s is None for s in self.shape):
            return None
        return math.prod(s for s in self.shape if s is not None) * int(
            np.dtype(self.dtype).itemsize)


@dataclasses.dataclass(frozen=True)
class SemaphoreOp:
    """A semaphore operation in the kernel body: signal, wait, read, or a DMA's wait."""

    kind: SemaphoreOpKind
    semaphore: str  # origin of the semaphore ref
    source: str | None
    device: bool = False  # signals another device / core (a `device_id` or `core_index`)
    device_id: str | None = None  # the `device_id` expression (a jaxpr value), when signalled


@dataclasses.dataclass(frozen=True)
class FusedFunction:
    """A function `fuser.fuse` moved into a fusible kernel: a prologue computing an input
    block, or an epilogue applied to an output block."""

    role: Literal["prologue", "epilogue"]
    operand: str  # origin of the kernel operand it feeds (prologue) or consumes (epilogue)
    jaxpr: str
    sources: tuple[str, ...]  # "file.py:LINE" of the user's lines it came from


@dataclasses.dataclass(frozen=True)
class Fusion:
    """What `fuser.fuse` / `fuser.fusible` fused into a kernel."""

    functions: tuple[FusedFunction, ...]
    # kernel operand origin -> the user's array it was computed from ("x", "b", "args[1]")
    operand_arrays: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One Pallas kernel launch, captured from a traced function."""

    index: int  # launch order within the capture
    name: str
    kind: KernelKind
    source: str | None  # "file.py:LINE" where the kernel body is defined
    call_site: str | None  # "file.py:LINE" of the pallas_call / kernel launch
    context: tuple[str, ...]  # enclosing transformations, outermost first: ("jit", "scan")
    grid: tuple[int | None, ...]  # None: a dynamic dimension whose value is not known
    grid_names: tuple[str, ...] | None
    dynamic_grid_dims: tuple[int, ...]  # positions in `grid` that Pallas marked dynamic
    vmapped_dims: tuple[int, ...]  # grid dimensions added by `vmap`
    dimension_semantics: tuple[str, ...] | None
    operands: tuple[Operand, ...]  # scalar prefetch, inputs, outputs, scratch: Pallas's order
    input_output_aliases: tuple[tuple[int, int], ...]
    compiler_params: Mapping[str, Mapping[str, Any]]  # backend -> its CompilerParams fields
    backend: Backend | None  # from the compiler params; None when they do not say
    cost_estimate: CostEstimate | None
    kernel_jaxpr: str
    mesh: MeshInfo | None = None
    prefetch_values: tuple[np.ndarray | None, ...] = ()  # concrete scalar-prefetch arrays
    # Beyond BlockSpecs: nested `emit_pipeline`s (kind "pipeline", operands with `outer`),
    # `run_scoped` buffers (role "scratch", origin "scoped[i]"), manual DMAs and semaphores.
    pipelines: tuple[Kernel, ...] = ()
    scoped: tuple[Operand, ...] = ()
    dmas: tuple[DmaCopy, ...] = ()
    semaphore_ops: tuple[SemaphoreOp, ...] = ()
    fusion: Fusion | None = None
    # The TPU chip ("v5e") whose abstract device the kernel was traced under, on a host
    # without a TPU, because its tracing asked the chip; None when traced as is.
    traced_for_chip: str | None = None
    # Why dynamic grid dimensions or scalar-prefetch values stayed unknown at capture (the
    # arguments were abstract, the computation before the kernel could not run, ...).
    dynamic_values_reason: str | None = None
    # Inside `shard_map`: its mesh (kind "shard_map"), as traced: the devices the kernel runs on.
    device_mesh: MeshInfo | None = None
    # Nested pipelines whose index maps use the enclosing kernel's program ids: the first
    # `outer_dims` grid dimensions are the enclosing kernel's grid (the pipeline runs whole,
    # from its first step, in each outer program).
    outer_dims: int = 0
    # Nested pipelines given their buffers (`emit_pipeline(..., allocations=...)`, made by a
    # `run_scoped` of the enclosing body): they allocate none of their own.
    preallocated: bool = False
    # Body equations whose nested structure (DMA, semaphore op, pipeline) could not be read:
    # what, where and why; the rest of the capture stands.
    structure_notes: tuple[str, ...] = ()
    handle: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def communicates(self) -> bool:
        """Does the kernel talk to other devices (remote DMAs, semaphore signals sent to a
        device id)? Only TPU interpret mode runs such kernels on a CPU."""
        return any(d.kind == "remote" for d in self.dmas) or any(
            op.device for op in self.semaphore_ops)

    @property
    def programs(self) -> int | None:
        """Number of grid programs (None while a dynamic dimension is unknown)."""
        if any(g is None for g in self.grid):
            return None
        return math.prod(self.grid)  # type: ignore[arg-type]

    @property
    def grid_known(self) -> bool:
        return all(g is not None for g in self.grid)

    def operands_with_role(self, role: Role) -> tuple[Operand, ...]:
        return tuple(op for op in self.operands if op.role == role)

    @property
    def inputs(self) -> tuple[Operand, ...]:
        return self.operands_with_role("input")

    @property
    def outputs(self) -> tuple[Operand, ...]:
        return self.operands_with_role("output")

    @property
    def scratch(self) -> tuple[Operand, ...]:
        return self.operands_with_role("scratch")

    @property
    def scalar_prefetch(self) -> tuple[Operand, ...]:
        return tuple(op for op in self.operands if op.scalar_prefetch)

    @property
    def blocked_operands(self) -> tuple[Operand, ...]:
        """Inputs and outputs that have a BlockSpec (those the tiling analysis covers)."""
        return tuple(op for op in self.operands if op.block_dims is not None)

    def operand(self, origin: str) -> Operand:
        for op in self.operands:
            if op.origin == origin:
                return op
        known = ", ".join(op.origin for op in self.operands)
        raise KeyError(f"kernel {self.name!r} has no operand {origin!r}; it has: {known}")

    def check_invariants(self) -> None:
        """Assert the capture is self-consistent (used by tests on every captured kernel)."""
        assert len(self.grid) == len(self.dynamic_grid_dims) + sum(
            1 for i in range(len(self.grid)) if i not in self.dynamic_grid_dims
        )
        if self.grid_names is not None:
            assert len(self.grid_names) == len(self.grid), (self.grid_names, self.grid)
        if self.dimension_semantics is not None:
            assert len(self.dimension_semantics) == len(self.grid), self.dimension_semantics
        assert all(d < len(self.grid) for d in self.vmapped_dims)
        assert all(g is None or g >= 0 for g in self.grid), self.grid
        origins = [op.origin for op in self.operands]
        assert len(set(origins)) == len(origins), origins
        for op in self.operands:
            if op.block_dims is not None:
                assert len(op.block_dims) == len(op.shape), (op.origin, op.block_dims, op.shape)
                assert op.index_map_jaxpr is not None or self.kind == "mesh", op.origin
            assert all(s >= 0 for s in op.shape), (op.origin, op.shape)
        assert len(self.prefetch_values) in (0, len(self.scalar_prefetch))
        assert self.kind == "mesh" or self.mesh is None


@dataclasses.dataclass(frozen=True)
class Capture(Sequence[Kernel]):
    """Every Pallas kernel a call launches, in launch order."""

    kernels: tuple[Kernel, ...]
    function_name: str
    concrete: bool  # were the arguments concrete arrays (so dynamic values could be evaluated)?
    handle: Any = dataclasses.field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.kernels)

    def __iter__(self) -> Iterator[Kernel]:
        return iter(self.kernels)

    def __getitem__(self, i):
        return self.kernels[i]

    @property
    def notes(self) -> tuple[str, ...]:
        """How the call was traced, where the reader must know it: as on a chip it is not
        running on, because the kernel asked for the device kind."""
        chip = getattr(self.handle, "traced_for_chip", None)
        because = getattr(self.handle, "traced_for_chip_because", None)
        return (f"traced as on TPU {chip}: {because}",) if chip and because else ()

    def argument_positions(self, kernel: Kernel) -> dict[str, int]:
        """Input origin -> position among the call's flat array arguments, for the kernel's
        inputs that are one of those arguments unchanged (empty when not known)."""
        if self.handle is None or kernel.handle is None:
            return {}
        return self.handle.argument_positions(kernel.handle, [op.origin for op in kernel.inputs])

    def argument_names(self) -> tuple[str, ...] | None:
        """The traced call's own names for its flat array arguments ("x", "p['a']",
        "args[0]"), or None."""
        if self.handle is None:
            return None
        info = getattr(self.handle.closed_jaxpr.jaxpr, "debug_info", None)
        names = getattr(info, "arg_names", None)
        return tuple(str(n) for n in names) if names is not None else None

    def check_invariants(self) -> None:
        assert [k.index for k in self.kernels] == list(range(len(self.kernels)))
        for k in self.kernels:
            k.check_invariants()
